"""Indexes for the Billing page: a workspace's periods, and its money movements by date."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0005_workspace_usage_rate'),
        ('billing', '0003_drop_stop_notice_kinds'),
        ('clusters', '0009_cluster_page_indexes'),
    ]

    operations = [
        migrations.AddIndex(
            model_name='ledgerentry',
            index=models.Index(fields=['workspace', 'period'], name='billing_led_workspa_75194a_idx'),
        ),
        migrations.AddIndex(
            model_name='ledgerentry',
            index=models.Index(condition=models.Q(('kind', 'usage'), _negated=True), fields=['workspace', 'created_at'],
                               name='ledger_credits_by_date'),
        ),
    ]
