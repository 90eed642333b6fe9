from __future__ import annotations

from celery import shared_task

from audit.retention import prune_expired


@shared_task(soft_time_limit=600)
def prune_audit_log() -> int:
    return prune_expired()
