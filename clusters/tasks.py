"""Thin Celery tasks: ids in, reload, act through the lifecycle or services."""

from __future__ import annotations

import datetime as dt
import logging

from celery import Task, shared_task
from django.conf import settings
from django.utils import timezone

from clusters import enforcement, lifecycle
from clusters.models import Cluster
from clusters.providers import get_provider
from clusters.providers.base import VolumeNotSynced
from clusters.services import hosts
from clusters.services.lease import claim_for_sweep, mark_queued
from clusters.services.volumes import (
    SYNCABLE,
    SYNCED,
    record_volume_sync_failed,
    record_volume_synced,
    volume_sync_not_queued,
)

log = logging.getLogger(__name__)


@shared_task(acks_late=True, soft_time_limit=900, time_limit=960)
def advance_cluster(cluster_id: int) -> None:
    look_at = lifecycle.advance(cluster_id)
    if look_at is not None and settings.CLUSTER_SELF_RESCHEDULE:
        # Queued for when the machines have news: a cluster whose machines boot for minutes
        # costs one pass then, not one every poll (issue 38: 200 booting clusters polled every
        # 2 s took 1.25 CPUs). The sweep re-drives one whose queued pass was lost.
        ahead = (look_at - timezone.now()).total_seconds()
        queue_advance(cluster_id, countdown=min(max(ahead, 0), settings.CLUSTER_LOOK_AHEAD_SECONDS))


def queue_advance(cluster_id: int, *, countdown: float = 0) -> bool:
    """Queue a pass over the cluster. A broker that is down is logged, not raised: callers run
    after a commit, which must stand, and the sweep re-drives the cluster once it is back."""
    mark_queued([cluster_id], timezone.now() + dt.timedelta(seconds=countdown))
    return _publish(cluster_id, countdown)


def _publish(cluster_id: int, countdown: float = 0) -> bool:
    try:
        advance_cluster.apply_async((cluster_id,), countdown=countdown or None)
    except Exception:  # any broker failure; the sweep is the retry
        log.exception("could not queue a pass over cluster %s; the sweep will re-drive it", cluster_id)
        mark_queued([cluster_id], None)
        return False
    return True


@shared_task(soft_time_limit=60)
def sweep_clusters() -> int:
    """Re-drive whatever is stuck (a lost task, a dead worker) and enforce deadlines; a
    cluster whose pass is already queued is left to it."""
    ids = claim_for_sweep(lifecycle.needs_driving())
    for cluster_id in ids:
        _publish(cluster_id)
    return len(ids)


@shared_task(bind=True, acks_late=True, soft_time_limit=120, time_limit=150)
def meter_and_enforce(self: Task) -> dict:
    """The periodic money pass (beat, every METERING_INTERVAL_SECONDS): meter, recharge, warn,
    stop. An environment that reaches its budget before the next beat gets a pass at that
    instant (docs/billing.md, "How far past a budget a stop lands")."""
    result = enforcement.meter_and_enforce()
    if result.get("next_pass_at") and not self.request.is_eager:
        try:
            meter_and_enforce.apply_async(eta=dt.datetime.fromisoformat(result["next_pass_at"]))
        except Exception:  # the next beat's pass stops it, a period later
            log.exception("could not queue the budget's own pass")
    return result


@shared_task(soft_time_limit=240, time_limit=270)
def wipe_returned_hosts() -> list[dict]:
    """Beat, every HOST_RETURN_SECONDS: a down host that answers again has its leftover
    machines released and wiped, then goes back to the state it had (clusters.services.hosts)."""
    return hosts.wipe_returned_hosts()


@shared_task(acks_late=True, soft_time_limit=3600, time_limit=3660)
def sync_volume(cluster_id: int) -> str:
    """Save a running cluster's volume folder to its volume (clusters.services.volumes): copy
    the folder through the cluster's provider and record the outcome."""
    cluster = Cluster.objects.select_related("volume", "machine_type").get(pk=cluster_id)
    if cluster.status not in SYNCABLE or cluster.volume_id is None:
        return record_volume_sync_failed(cluster, f"The volume was not saved: the cluster is {cluster.status}.")
    nodes = list(cluster.nodes.select_related("host").filter(released_at__isnull=True, replacing__isnull=True))
    try:
        synced = get_provider(cluster.provider).sync_volume(cluster, nodes)
    except VolumeNotSynced as error:
        return record_volume_sync_failed(cluster, str(error))
    record_volume_synced(cluster, synced)
    return SYNCED


def queue_volume_sync(cluster_id: int) -> bool:
    """After a commit: a broker that is down is logged; the customer can ask again."""
    try:
        sync_volume.delay(cluster_id)
    except Exception:  # any broker failure
        log.exception("could not queue the volume sync of cluster %s", cluster_id)
        volume_sync_not_queued(cluster_id)
        return False
    return True
