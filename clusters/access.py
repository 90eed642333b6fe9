"""The one lookup every view, partial and endpoint uses to reach a cluster: scoped to the
user's current workspace, 404 otherwise (never 403, which would confirm it exists)."""

from __future__ import annotations

from django.http import Http404, HttpRequest

from accounts.tenancy import require_tenancy
from clusters.models import Cluster
from clusters.queries import cluster_for_detail


def get_cluster_for_user(request: HttpRequest, cluster_id: int, *, detail: bool = False) -> Cluster:
    tenancy = require_tenancy(request)
    queryset = Cluster.objects.filter(workspace_id=tenancy.workspace.pk)
    if detail:
        queryset = cluster_for_detail(queryset)
    cluster = queryset.filter(pk=cluster_id).first()
    if cluster is None:
        raise Http404("No such cluster in this workspace.")
    return cluster
