"""Thin Celery tasks for the metrics rounds, the roll-up and retention."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from metrics import collection, services


@shared_task(soft_time_limit=30)
def collect_metrics() -> int:
    queued = 0
    for cluster_id in collection.due_clusters():
        if collection.claim(cluster_id):
            collect_cluster_metrics.delay(cluster_id)
            queued += 1
    return queued


@shared_task(acks_late=False, soft_time_limit=settings.METRICS_ROUND_SECONDS, time_limit=settings.METRICS_ROUND_SECONDS + 15)
def collect_cluster_metrics(cluster_id: int) -> int | None:
    # The claim was taken when this was queued; a round that dies lets it lapse by itself.
    try:
        return collection.collect_cluster(cluster_id)
    finally:
        collection.release(cluster_id)


@shared_task(soft_time_limit=120)
def roll_up_metrics() -> dict[str, int]:
    return {"rolled_up": services.roll_up(), "pruned": services.prune()}
