"""Accounts made before self-serve sign-up were made by operators: their addresses count as
verified, so mandatory email verification does not lock them out (docs/accounts.md)."""

from django.conf import settings
from django.db import migrations


def verify_existing(apps, schema_editor):
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    EmailAddress = apps.get_model("account", "EmailAddress")
    known = set(EmailAddress.objects.values_list("user_id", flat=True))
    EmailAddress.objects.bulk_create([
        EmailAddress(user_id=user.pk, email=user.email, verified=True, primary=True)
        for user in User.objects.exclude(email="").exclude(pk__in=known)
    ], ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_invitation"),
        ("account", "0009_emailaddress_unique_primary_email"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]
    operations = [migrations.RunPython(verify_existing, migrations.RunPython.noop)]
