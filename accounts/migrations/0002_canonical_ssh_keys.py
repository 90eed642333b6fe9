"""Re-parse every stored SSH key: keep it in canonical form, or delete a row that is not one
plain key (options, a second key after `;` or a newline, markers in the comment)."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import migrations

logger = logging.getLogger(__name__)


def canonicalize_keys(apps, schema_editor):
    from accounts.sshkeys import parse_public_key

    SSHKey = apps.get_model("accounts", "SSHKey")
    for row in SSHKey.objects.all():
        try:
            key = parse_public_key(row.public_key)
        except ValidationError as exc:
            logger.warning("Deleting SSH key %s of workspace %s: %s", row.pk, row.workspace_id, " ".join(exc.messages))
            row.delete()
            continue
        duplicate = SSHKey.objects.filter(workspace_id=row.workspace_id, fingerprint=key.fingerprint).exclude(pk=row.pk)
        if duplicate.exists():
            row.delete()
            continue
        if (row.public_key, row.fingerprint) != (key.line, key.fingerprint):
            row.public_key, row.fingerprint = key.line, key.fingerprint
            row.save(update_fields=["public_key", "fingerprint"])


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [migrations.RunPython(canonicalize_keys, migrations.RunPython.noop)]
