"""The periodic node health check of ready clusters (docs/nodeops.md, "Node health").

Beat runs `tasks.check_node_health` every NODE_HEALTH_INTERVAL_SECONDS; it queues one
`check_cluster_health` per ready cluster that is due and not being checked already. A round
asks the cluster's provider about every ready node at once — over SSH, one session per node,
on connections this worker process keeps between rounds — and hands what it found to
`services.record_node_health`, which writes it and tells the owner about changes.

A round holds no lifecycle lease and no cluster lock: a terminate or a grow never waits for
it, and a cluster that stops being ready mid-round simply has its findings dropped."""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.core.cache import cache
from django.db.models import Max, Q
from django.utils import timezone

from clusters.models import Cluster, Node, NodeHealth, Status
from clusters.node_health.services import record_node_health
from clusters.providers import get_provider

log = logging.getLogger(__name__)


def lock_key(cluster_id: int) -> str:
    return f"node-health:{cluster_id}"


def checked_nodes(cluster: Cluster) -> list[Node]:
    """The nodes a round asks about: live and ready, neither a machine still being swapped in
    for another (`replacing` set) nor one with a replacement on the way. The customer gave up
    on that one; its software gives it no new work (a drained Ray node's raylet leaves once
    idle) and the new machine takes its private address once joined, so a verdict on it would
    only raise a false alarm."""
    swapping = cluster.nodes.filter(replacing__isnull=False, released_at__isnull=True).values("replacing_id")
    return list(
        cluster.nodes.select_related("host")
        .filter(released_at__isnull=True, replacing__isnull=True, state=Node.State.READY)
        .exclude(pk__in=swapping)
        .defer("log_tail").order_by("index")
    )


def due_clusters(now: dt.datetime | None = None) -> list[int]:
    """Ready clusters not checked within the last half interval (a beat that fires twice, or
    a round that ran late, does not make a second one), oldest check first."""
    now = now or timezone.now()
    recent = now - dt.timedelta(seconds=settings.NODE_HEALTH_INTERVAL_SECONDS / 2)
    rows = (
        Cluster.objects.filter(status=Status.READY)
        .annotate(last=Max("nodes__health_checked_at", filter=Q(nodes__released_at__isnull=True)))
        .filter(Q(last__isnull=True) | Q(last__lt=recent))
        .order_by("last", "pk").values_list("pk", flat=True)
    )
    return list(rows[: settings.NODE_HEALTH_MAX_CLUSTERS_PER_ROUND])


def claim(cluster_id: int) -> bool:
    """One round per cluster at a time, across workers: a key that expires by itself when the
    worker holding it dies (a little after the task's hard time limit)."""
    return bool(cache.add(lock_key(cluster_id), 1, timeout=settings.NODE_HEALTH_ROUND_SECONDS + 30))


def release(cluster_id: int) -> None:
    cache.delete(lock_key(cluster_id))


def is_running(cluster_id: int) -> bool:
    return cache.get(lock_key(cluster_id)) is not None


def check_cluster(cluster_id: int) -> dict[str, str] | None:
    """One round over a ready cluster's nodes: node name -> health found (None: not checked:
    the cluster is not ready, has no node to check, or its provider checks nothing)."""
    cluster = (
        Cluster.objects.select_related("machine_type__location", "environment")
        .defer("node_secrets").filter(pk=cluster_id, status=Status.READY).first()
    )
    if cluster is None:
        return None
    nodes = checked_nodes(cluster)
    if not nodes:
        return None
    started = timezone.now()
    reports = get_provider(cluster.provider).check_health(cluster, nodes)
    if reports is None:
        return None
    found = {}
    for node in nodes:
        report = reports.get(node.name)
        if report is None or report.health not in NodeHealth.values:
            continue
        found[node.pk] = (report.health, report.detail)
    record_node_health(cluster.pk, found, checked_at=started)
    return {node.name: found[node.pk][0] for node in nodes if node.pk in found}
