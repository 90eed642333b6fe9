"""The metrics rounds of ready clusters (docs/metrics.md).

Beat runs `tasks.collect_metrics` every METRICS_INTERVAL_SECONDS; it queues one
`collect_cluster_metrics` per ready cluster not collected within half an interval and not
being collected now. A round asks the provider for every node at once (one SSH session per
node, on the connections the health rounds keep), records a fine sample per node, pushes the
points to open cluster pages, and checks whether the cluster has gone idle."""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.core.cache import cache
from django.db.models import Q
from django.template.loader import render_to_string
from django.utils import timezone

from clusters.models import Cluster, Node, Status
from clusters.notices import broadcast, cluster_group
from clusters.providers import get_provider
from metrics import idle, services
from metrics.models import NodeSample

log = logging.getLogger(__name__)


def lock_key(cluster_id: int) -> str:
    return f"node-metrics:{cluster_id}"


def last_key(cluster_id: int) -> str:
    return f"node-metrics-last:{cluster_id}"


def due_clusters(now: dt.datetime | None = None) -> list[int]:
    """Ready clusters whose last round is more than half an interval old (kept in the cache, so
    the beat never scans the samples table), longest-waiting first."""
    now = now or timezone.now()
    ready = list(Cluster.objects.filter(status=Status.READY).order_by("pk").values_list("pk", flat=True))
    last = cache.get_many([last_key(pk) for pk in ready])
    recent = now.timestamp() - settings.METRICS_INTERVAL_SECONDS / 2
    due = [pk for pk in ready if last.get(last_key(pk), 0.0) < recent]
    due.sort(key=lambda pk: last.get(last_key(pk), 0.0))
    return due[: settings.METRICS_MAX_CLUSTERS_PER_ROUND]


def claim(cluster_id: int) -> bool:
    return bool(cache.add(lock_key(cluster_id), 1, timeout=settings.METRICS_ROUND_SECONDS + 30))


def release(cluster_id: int) -> None:
    cache.delete(lock_key(cluster_id))


def collected_nodes(cluster: Cluster) -> list[Node]:
    return list(cluster.nodes.select_related("host")
                .filter(Q(released_at__isnull=True), state=Node.State.READY, replacing__isnull=True)
                .defer("log_tail").order_by("index"))


def collect_cluster(cluster_id: int) -> int | None:
    """One round; the number of nodes that answered (None: nothing to collect from)."""
    cluster = (Cluster.objects.select_related("machine_type__location", "environment", "workspace", "created_by")
               .defer("node_secrets").filter(pk=cluster_id, status=Status.READY).first())
    if cluster is None:
        return None
    nodes = collected_nodes(cluster)
    if not nodes:
        return None
    at = timezone.now()
    cache.set(last_key(cluster.pk), at.timestamp(), timeout=settings.METRICS_INTERVAL_SECONDS * 10)
    result = get_provider(cluster.provider).collect_metrics(cluster, nodes)
    if result is None:
        return None
    samples = services.record_round(cluster, nodes, result.readings, at)
    if samples:
        push(cluster, nodes, samples)
    idle.check(cluster, nodes, samples, at)
    return len(samples)


def push(cluster: Cluster, nodes: list[Node], samples: list[NodeSample]) -> None:
    """The round's points and the refreshed "top" table to the open pages of the cluster."""
    names = {n.pk: n.name for n in nodes}
    html = render_to_string("clusters/_metrics_push.html", {
        "payload": services.push_payload(cluster, samples, names),
        "cluster": cluster, "top_rows": services.top(cluster), "oob": True,
    })
    broadcast(cluster_group(cluster.pk), html)
