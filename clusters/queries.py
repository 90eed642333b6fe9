"""Reads shared by pages, partials, pushes and the API.

Each one makes a fixed number of queries and returns a bounded amount of data however many
clusters, nodes and events there are: lists are sliced in the database, a cluster's events
come as a window of the newest ones (older ones on request), and nothing reads the columns
a page never shows (node secrets; log tails outside the nodes table).
"""

from __future__ import annotations

from decimal import Decimal

from django.core.paginator import Page, Paginator
from django.db.models import F, Prefetch, QuerySet, Sum
from django.db.models.functions import Length

from clusters.models import Cluster, ClusterEvent, ClusterQuerySet, Node, Status

_CATALOGUE = ("machine_type__gpu", "machine_type__location", "environment")
# Lists show a page of clusters; a page of nodes in a row would be a page of its own.
CLUSTERS_PER_PAGE = 25
# The detail page and its pushes carry the newest events; older ones load on demand.
EVENTS_WINDOW = 20
LIVE, ALL = "live", "all"
STATUS_FILTERS = (LIVE, ALL, *Status.values)


class UnknownStatus(ValueError):
    """A status filter that is neither live, all nor a cluster status."""


def clusters_with_status(queryset: ClusterQuerySet, status: str = LIVE) -> ClusterQuerySet:
    """live (the default), all, or one status; anything else raises UnknownStatus."""
    if status == ALL:
        return queryset
    if status == LIVE or not status:
        return queryset.live()
    if status not in Status.values:
        raise UnknownStatus(status)
    return queryset.filter(status=status)


def cluster_for_list(queryset: ClusterQuerySet) -> ClusterQuerySet:
    """A cluster's row: the cluster and its catalogue entry, none of its nodes."""
    return queryset.select_related(*_CATALOGUE).defer("node_secrets")


def clusters_page(queryset: ClusterQuerySet, number: int | str | None, per_page: int = CLUSTERS_PER_PAGE) -> Page:
    """One page of rows, newest first; a number past the end gives the last page."""
    paginator = Paginator(cluster_for_list(queryset).order_by("-created_at", "-id"), per_page)
    return paginator.get_page(number)


def cluster_for_detail(queryset: ClusterQuerySet) -> ClusterQuerySet:
    """The detail page's cluster with its nodes (each one a row of the page)."""
    return queryset.select_related(*_CATALOGUE, "volume", "created_by").defer("node_secrets").prefetch_related(
        Prefetch("nodes", queryset=Node.objects.select_related("host").order_by("index", "pk")),
    )


def cluster_for_push(queryset: ClusterQuerySet, *, hosts: bool) -> ClusterQuerySet:
    """A live push's cluster: the detail page's, its nodes without their log tails but with
    each tail's length (`log_length`): with `log_written` that tells a socket which lines its
    page lacks without reading 4,000 characters a node. `hosts`: with each node's host (the
    Connect card's ssh lines need them; rows do not)."""
    nodes = Node.objects.defer("log_tail").annotate(log_length=Length("log_tail")).order_by("index", "pk")
    if hosts:
        nodes = nodes.select_related("host")
    return queryset.select_related(*_CATALOGUE, "volume").defer("node_secrets").prefetch_related(
        Prefetch("nodes", queryset=nodes),
    )


def log_tails(node_ids: list[int]) -> dict[int, str]:
    """The log tails of the given nodes, by node id."""
    return dict(Node.objects.filter(pk__in=node_ids).values_list("pk", "log_tail"))


def workspace_instances(workspace_id: int, environment_id: int | None = None) -> QuerySet[Node]:
    """Every machine the workspace runs now (the GPU cloud's "instances"), each one a node of
    a cluster, in one environment when `environment_id` is given: the Instances page,
    GET /api/v1/instances, the CLI and the MCP tool read this."""
    nodes = Node.objects.filter(cluster__workspace_id=workspace_id, released_at__isnull=True)
    if environment_id is not None:
        nodes = nodes.filter(cluster__environment_id=environment_id)
    return (
        nodes
        .select_related("cluster__environment", "cluster__machine_type__gpu", "cluster__machine_type__location", "host")
        .order_by("-cluster__created_at", "cluster_id", "index", "pk")
    )


def count_instances(workspace_id: int, environment_id: int | None = None) -> int:
    """How many machines the workspace runs now (workspace_instances' length), from one index
    of live nodes by workspace: no join of every machine to its cluster (but for one
    environment's)."""
    nodes = Node.objects.filter(workspace_id=workspace_id, released_at__isnull=True)
    if environment_id is not None:
        nodes = nodes.filter(cluster__environment_id=environment_id)
    return nodes.count()


def workspace_instance(workspace_id: int, instance_id: int) -> Node | None:
    """One instance of the workspace, or None (callers answer 404, never 403)."""
    return workspace_instances(workspace_id).filter(pk=instance_id).first()


def committed_rate(workspace_id: int, *, environment_id: int | None = None) -> Decimal:
    """What every cluster the workspace (or one of its environments) runs, or is starting,
    costs per hour once it is billed: the runway of a create counts the clusters still booting
    too, which are not billed yet."""
    clusters = Cluster.objects.filter(workspace_id=workspace_id)
    if environment_id is not None:
        clusters = clusters.filter(environment_id=environment_id)
    total = clusters.terminable().aggregate(
        rate=Sum(F("price_per_machine_hour") * F("machine_count"))
    )["rate"]
    return total or Decimal("0.00")


def recent_events(cluster_id: int, *, before: int | None = None, after: int | None = None,
                  limit: int = EVENTS_WINDOW) -> tuple[list[ClusterEvent], bool]:
    """Up to `limit` events, newest first, and whether there are more beyond them.

    `before` pages back through the history (the "older events" link); `after` reads only
    what was recorded since a push, and "more" then means the window overflowed.
    """
    # With the audit entry each action's event links to (one LEFT JOIN, no query per event).
    events = ClusterEvent.objects.filter(cluster_id=cluster_id).select_related("audit_entry").order_by("-id")
    if before is not None:
        events = events.filter(id__lt=before)
    if after is not None:
        events = events.filter(id__gt=after)
    window = list(events[: limit + 1])
    return window[:limit], len(window) > limit
