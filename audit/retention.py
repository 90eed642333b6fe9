"""Entries older than AUDIT_RETENTION_DAYS are deleted, by this module only."""

from __future__ import annotations

import datetime as dt

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from audit.models import AuditEvent

# Read by the PostgreSQL trigger (migration 0002): set for this transaction only, it lets the
# prune's DELETE through; every other UPDATE or DELETE of an entry is refused.
PRUNE_SETTING = "runcrate.audit_prune"


def prune_expired(now: dt.datetime | None = None) -> int:
    """Delete the entries past the retention period; returns how many."""
    cutoff = (now or timezone.now()) - dt.timedelta(days=settings.AUDIT_RETENTION_DAYS)
    table = AuditEvent._meta.db_table
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT set_config(%s, 'on', true)", [PRUNE_SETTING])
        # Raw SQL: the model and its queryset refuse deletes by design.
        cursor.execute(f"DELETE FROM {table} WHERE created_at < %s", [cutoff])
        return cursor.rowcount
