"""Reads shared by pages, partials, pushes and the API, each one a fixed number of queries."""

from __future__ import annotations

from decimal import Decimal

from django.db.models import F, Prefetch, QuerySet, Sum

from clusters.models import Cluster, ClusterEvent, Node

_CATALOGUE = ("machine_type__gpu", "machine_type__location", "environment")


def cluster_for_list(queryset: QuerySet[Cluster]) -> QuerySet[Cluster]:
    return queryset.select_related(*_CATALOGUE).prefetch_related(
        Prefetch("nodes", queryset=Node.objects.order_by("index"))
    )


def cluster_for_detail(queryset: QuerySet[Cluster]) -> QuerySet[Cluster]:
    return queryset.select_related(*_CATALOGUE, "volume", "created_by").prefetch_related(
        Prefetch("nodes", queryset=Node.objects.select_related("host").order_by("index")),
        Prefetch("events", queryset=ClusterEvent.objects.order_by("-created_at", "-id")),
    )


def workspace_instances(workspace_id: int) -> QuerySet[Node]:
    """Every machine the workspace runs now (the GPU cloud's "instances"), each one a node of
    a cluster: the Instances page, GET /api/v1/instances, the CLI and the MCP tool read this."""
    return (
        Node.objects.filter(cluster__workspace_id=workspace_id, released_at__isnull=True)
        .select_related("cluster__environment", "cluster__machine_type__gpu", "cluster__machine_type__location", "host")
        .order_by("-cluster__created_at", "cluster_id", "index")
    )


def workspace_instance(workspace_id: int, instance_id: int) -> Node | None:
    """One instance of the workspace, or None (callers answer 404, never 403)."""
    return workspace_instances(workspace_id).filter(pk=instance_id).first()


def committed_rate(workspace_id: int) -> Decimal:
    """What every cluster the workspace runs, or is starting, costs per hour once it is billed:
    the runway of a create counts the clusters still booting too, which are not billed yet."""
    total = Cluster.objects.filter(workspace_id=workspace_id).terminable().aggregate(
        rate=Sum(F("price_per_machine_hour") * F("machine_count"))
    )["rate"]
    return total or Decimal("0.00")
