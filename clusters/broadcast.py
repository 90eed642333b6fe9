"""Live status: render a cluster's partials and push them to the pages watching it."""

from __future__ import annotations

import logging

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

from clusters import connect
from clusters.models import Cluster
from clusters.queries import cluster_for_detail

log = logging.getLogger(__name__)


def cluster_group(cluster_id: int) -> str:
    return f"cluster-{cluster_id}"


def environment_group(environment_id: int) -> str:
    return f"environment-{environment_id}"


def broadcast(group: str, html: str) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, {"type": "html.update", "html": html})
    except Exception:  # noqa: BLE001 - a missed push must never undo a committed change
        log.exception("broadcast to %s failed", group)


def _push_context(cluster: Cluster) -> dict:
    # Pushed HTML is shared by every viewer, so it carries no CSRF token of its own: its
    # forms post with hx-post, and htmx sends the page's token from <body hx-headers>.
    return {"cluster": cluster, "oob": True, "csrf_token": "NOTPROVIDED", "connect": connect.page_context(cluster)}


def render_cluster_detail(cluster: Cluster) -> str:
    """The detail page's live partials, each swapped in by its id (hx-swap-oob)."""
    context = _push_context(cluster)
    return "".join(
        render_to_string(f"clusters/detail.html#{name}", context)
        for name in ("status-card", "nodes-table", "connect-card", "events-list")
    )


def current_cluster_detail(cluster_id: int) -> str:
    cluster = cluster_for_detail(Cluster.objects.filter(pk=cluster_id)).first()
    return render_cluster_detail(cluster) if cluster else ""


def broadcast_cluster(cluster_id: int) -> None:
    cluster = cluster_for_detail(Cluster.objects.filter(pk=cluster_id)).first()
    if cluster is None:
        return
    broadcast(cluster_group(cluster_id), render_cluster_detail(cluster))
    broadcast(
        environment_group(cluster.environment_id),
        render_to_string("clusters/list.html#cluster-row", _push_context(cluster)),
    )
