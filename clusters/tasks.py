"""Thin Celery tasks: ids in, reload, act through the lifecycle or services."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from clusters import lifecycle


@shared_task(acks_late=True, soft_time_limit=900, time_limit=960)
def advance_cluster(cluster_id: int) -> None:
    again = lifecycle.advance(cluster_id)
    if again and settings.CLUSTER_SELF_RESCHEDULE:
        advance_cluster.apply_async((cluster_id,), countdown=settings.CLUSTER_POLL_SECONDS)


@shared_task(soft_time_limit=60)
def sweep_clusters() -> int:
    """Re-drive whatever is stuck (a lost task, a dead worker) and enforce deadlines."""
    ids = lifecycle.needs_driving()
    for cluster_id in ids:
        advance_cluster.delay(cluster_id)
    return len(ids)
