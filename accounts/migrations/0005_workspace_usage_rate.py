"""The burn rate kept on the workspace (billing.services.refresh_usage_rate), filled in from
the open usage intervals of every workspace that has some."""

from decimal import Decimal

from django.db import migrations, models
from django.db.models import Sum


def fill_usage_rates(apps, schema_editor):
    Workspace = apps.get_model("accounts", "Workspace")
    MachineUsage = apps.get_model("billing", "MachineUsage")
    rates = MachineUsage.objects.filter(ended_at__isnull=True).values_list("workspace_id").annotate(rate=Sum("rate"))
    for workspace_id, rate in rates.values_list("workspace_id", "rate"):
        Workspace.objects.filter(pk=workspace_id).update(usage_rate=Decimal(rate or 0).quantize(Decimal("0.0001")))


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0004_verify_existing_emails"),
        ("billing", "0003_drop_stop_notice_kinds"),
    ]

    operations = [
        migrations.AddField(
            model_name="workspace",
            name="usage_rate",
            field=models.DecimalField(decimal_places=4, default=Decimal("0.0000"), max_digits=14),
        ),
        migrations.RunPython(fill_usage_rates, migrations.RunPython.noop),
    ]
