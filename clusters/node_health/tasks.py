"""The health check's Celery tasks: beat's round-up, and one round per cluster."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from clusters.node_health import rounds

log = logging.getLogger(__name__)


@shared_task(soft_time_limit=30)
def check_node_health() -> int:
    """Beat, every NODE_HEALTH_INTERVAL_SECONDS: queue one health round per ready cluster that
    is due and not in a round already."""
    queued = 0
    for cluster_id in rounds.due_clusters():
        if rounds.is_running(cluster_id):
            continue
        try:
            check_cluster_health.apply_async((cluster_id,), expires=settings.NODE_HEALTH_INTERVAL_SECONDS)
        except Exception:  # the next beat queues it again
            log.exception("could not queue a health round for cluster %s", cluster_id)
            break
        queued += 1
    return queued


@shared_task(soft_time_limit=settings.NODE_HEALTH_ROUND_SECONDS, time_limit=settings.NODE_HEALTH_ROUND_SECONDS + 15)
def check_cluster_health(cluster_id: int) -> dict[str, str] | None:
    if not rounds.claim(cluster_id):
        return None  # a round is running for it
    try:
        return rounds.check_cluster(cluster_id)
    finally:
        rounds.release(cluster_id)
