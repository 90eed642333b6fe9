"""Reads shared by pages, partials, pushes and the API, each one a fixed number of queries."""

from __future__ import annotations

from django.db.models import Prefetch, QuerySet

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
