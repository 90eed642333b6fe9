"""The cluster page's metrics: the series its charts start from (JSON, session auth)."""

from __future__ import annotations

import datetime as dt

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from accounts.http import AuthenticatedHttpRequest
from clusters.access import get_cluster_for_user
from metrics import services

MAX_WINDOW = dt.timedelta(days=7)


@login_required
@require_GET
def cluster_series(request: AuthenticatedHttpRequest, cluster_id: int) -> HttpResponse:
    cluster = get_cluster_for_user(request, cluster_id)
    try:
        seconds = int(request.GET.get("seconds", "900"))
    except ValueError:
        return JsonResponse({"error": {"seconds": ["Must be a whole number of seconds."]}}, status=400)
    if not 60 <= seconds <= MAX_WINDOW.total_seconds():
        return JsonResponse({"error": {"seconds": ["Between 60 and 604800."]}}, status=400)
    found = services.series(cluster, since=timezone.now() - dt.timedelta(seconds=seconds))
    return JsonResponse({
        "resolution": found.resolution, "step": found.step,
        "nodes": {name: [{**p, "at": p["at"].timestamp()} for p in points] for name, points in found.nodes.items()},
    })
