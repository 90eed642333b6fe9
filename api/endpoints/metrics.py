"""Node metrics: a cluster's series, and every ready node of the workspace in the Prometheus
text format for a customer's own Prometheus or Grafana (bearer API key)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from ninja import Query, Router

from api import schemas
from api.app import context, invalid, ok, responses
from api.endpoints.clusters import get_cluster
from clusters.models import Cluster
from metrics import services

router = Router(tags=["Metrics"])

MAX_BACK = dt.timedelta(days=7)


def _since(raw: str | None) -> dt.datetime | None:
    if raw is None or raw == "":
        return None
    now = timezone.now()
    if raw.strip().isdigit():
        seconds = int(raw.strip())
        if not 1 <= seconds <= MAX_BACK.total_seconds():
            raise invalid({"since": ["Seconds back must be between 1 and 604800 (7 days)."]})
        return now - dt.timedelta(seconds=seconds)
    try:
        moment = parse_datetime(raw.strip())
    except ValueError:
        moment = None
    if moment is None:
        raise invalid({"since": ["Give seconds back (e.g. 900) or an ISO 8601 time."]})
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, dt.UTC)
    if moment < now - MAX_BACK or moment > now:
        raise invalid({"since": ["Must be within the last 7 days."]})
    return moment


@router.get("clusters/{cluster_id}/metrics", operation_id="getClusterMetrics",
            summary="Per-node CPU, memory, disk, private-network and GPU series of a cluster",
            description="Fine points (one per collection round, every 10 s) for the last hour, 5-minute averages "
                        "for 7 days. Nodes that did not answer a round have a gap there.",
            response=responses({200: schemas.envelope(schemas.ClusterMetrics)}, 400))
def cluster_metrics(request: HttpRequest, cluster_id: schemas.PathId, query: Query[schemas.MetricsQuery]) -> dict[str, Any]:
    cluster = get_cluster(request, cluster_id)
    found = services.series(cluster, since=_since(query.since), step=query.step)
    return ok({"resolution": found.resolution, "step": found.step, "since": found.since,
               "nodes": [{"node": name, "points": points} for name, points in found.nodes.items()]})


@router.get("metrics/prometheus", operation_id="prometheusMetrics",
            summary="The latest figures of every ready node of the workspace, in the Prometheus text format",
            description="Scrape it with `authorization: {type: Bearer, credentials: <API key>}`. One gauge per "
                        "figure, labelled cluster, cluster_id, environment and node, stamped with the sample's time.",
            response={200: None, 401: schemas.Error, 429: schemas.Error},
            openapi_extra={"responses": {"200": {"description": "text/plain; version=0.0.4",
                                                 "content": {"text/plain": {"schema": {"type": "string"}}}}}})
def prometheus(request: HttpRequest) -> HttpResponse:
    ctx = context(request)
    text = services.prometheus_text(Cluster.objects.filter(workspace=ctx.workspace))
    return HttpResponse(text, content_type="text/plain; version=0.0.4; charset=utf-8")
