"""The months each cluster had billable time in (billing.models.UsageMonth), filled in from the
usage intervals: the month a machine started in, and every month its watermark moved into."""

import datetime as dt

import django.db.models.deletion
from django.db import migrations, models


def fill_usage_months(apps, schema_editor):
    MachineUsage = apps.get_model("billing", "MachineUsage")
    UsageMonth = apps.get_model("billing", "UsageMonth")
    months = set()
    for usage in MachineUsage.objects.values("cluster_id", "workspace_id", "environment_id", "started_at", "billed_until").iterator():
        month = dt.date(usage["started_at"].year, usage["started_at"].month, 1)
        while True:
            months.add((usage["cluster_id"], usage["workspace_id"], usage["environment_id"], month))
            month = (month + dt.timedelta(days=32)).replace(day=1)
            if usage["billed_until"] <= dt.datetime(month.year, month.month, 1, tzinfo=dt.UTC):
                break
    UsageMonth.objects.bulk_create(
        [UsageMonth(cluster_id=c, workspace_id=w, environment_id=e, period=p) for c, w, e, p in sorted(months)],
        batch_size=2000, ignore_conflicts=True,
    )


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0005_workspace_usage_rate'),
        ('billing', '0004_ledger_workspace_period_index'),
        ('clusters', '0009_cluster_page_indexes'),
    ]

    operations = [
        migrations.CreateModel(
            name='UsageMonth',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('period', models.DateField(help_text='First day of the month (UTC).')),
                ('cluster', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='usage_months', to='clusters.cluster')),
                ('environment', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.environment')),
                ('workspace', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.workspace')),
            ],
            options={
                'indexes': [models.Index(fields=['workspace', 'period', 'cluster'], name='billing_usa_workspa_483315_idx'),
                            models.Index(fields=['environment', 'period', 'cluster'], name='billing_usa_environ_01394d_idx')],
                'constraints': [models.UniqueConstraint(fields=('cluster', 'period'), name='one_usage_month_per_cluster')],
            },
        ),
        migrations.RunPython(fill_usage_months, migrations.RunPython.noop),
    ]
