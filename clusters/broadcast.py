"""Live status: tell the pages watching a cluster what changed; each socket renders it.

The committing thread only sends a small notice ("cluster 7 changed, nodes 3 and 4") after
the commit. The consumer holding each socket renders what its page lacks, off that thread,
as Baserow's ws tasks do: the status card, the node rows that changed (the whole nodes
table and the connect card when every node did), and the events recorded since its last
push, at most a window of them. A push is therefore bounded by the cluster's size, never
by its history: a cluster with 5,000 events pushes as much as one with 6.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.template.loader import render_to_string

from clusters import connect
from clusters.models import Cluster
from clusters.queries import EVENTS_WINDOW, cluster_for_detail, cluster_for_list, nodes_by_id, recent_events, with_nodes

log = logging.getLogger(__name__)

CHANGED = "cluster.changed"  # handled by consumers' cluster_changed
NETWORK_CHANGED = "network.changed"  # handled by ClusterConsumer.network_changed


def cluster_group(cluster_id: int) -> str:
    return f"cluster-{cluster_id}"


def environment_group(environment_id: int) -> str:
    return f"environment-{environment_id}"


def user_group(user_id: int) -> str:
    """Every live socket of one user, whatever it watches: told to re-check its access."""
    return f"user-{user_id}"


def revoke_user_sockets(user_id: int) -> None:
    """The user lost access somewhere (removed from a workspace): each of their sockets
    checks again and closes if it no longer may watch what it watches."""
    send_to_group(user_group(user_id), {"type": "access.changed"})


def send_to_group(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:  # a missed push must never undo a committed change
        log.exception("push to %s failed", group)


def broadcast(group: str, html: str) -> None:
    """Send ready-made HTML to every socket of a group."""
    send_to_group(group, {"type": "html.update", "html": html})


def broadcast_cluster(cluster_id: int, nodes: Iterable[int] | None = None) -> None:
    """After a commit: `nodes` are the ids of the nodes that changed, None when all did."""
    environment_id = Cluster.objects.filter(pk=cluster_id).values_list("environment_id", flat=True).first()
    if environment_id is None:
        return
    notice = {"type": CHANGED, "cluster_id": cluster_id, "nodes": None if nodes is None else sorted(set(nodes))}
    send_to_group(cluster_group(cluster_id), notice)
    send_to_group(environment_group(environment_id), notice)


# --- rendering, in the consumer --------------------------------------------------------


def _push_context(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    # Pushed HTML is shared by every viewer, so it carries no CSRF token of its own: its
    # forms post with hx-post, and htmx sends the page's token from <body hx-headers>.
    return {"cluster": cluster, "oob": True, "csrf_token": "NOTPROVIDED", **extra}


def _render(name: str, context: dict) -> str:
    return render_to_string(f"clusters/detail.html#{name}", context)


def _events_window(cluster: Cluster, context: dict) -> tuple[str, int | None]:
    events, older = recent_events(cluster.pk)
    html = _render("events-list", {**context, "events": events, "older_events": older})
    return html, events[0].pk if events else None


def _new_events(cluster: Cluster, context: dict, after: int | None) -> tuple[str, int | None]:
    """The events since `after`, prepended to the list; the whole window when too many."""
    if after is None:
        return _events_window(cluster, context)
    events, overflow = recent_events(cluster.pk, after=after, limit=EVENTS_WINDOW)
    if overflow:
        return _events_window(cluster, context)
    if not events:
        return "", after
    items = _render("older-events", {**context, "events": events, "older_events": False, "events_before": after})
    return f'<ol id="event-items" hx-swap-oob="afterbegin">{items}</ol>', events[0].pk


def render_cluster_now(cluster_id: int) -> tuple[list[str], int | None]:
    """Every live part of the detail page as it is now, for a socket that just joined."""
    return render_cluster_changes(cluster_id, None, None)


def render_cluster_changes(cluster_id: int, nodes: list[int] | None, after: int | None) -> tuple[list[str], int | None]:
    """What a page that has seen events up to `after` lacks once `nodes` (None: all) changed.

    Returns the WebSocket messages and the newest event id they carry. Table rows travel in
    a message of their own: htmx parses a message by its first tag, and a <tr> after a
    <section> would be dropped by the HTML parser.
    """
    queryset = Cluster.objects.filter(pk=cluster_id)
    # Every node's row when all changed; else only the card's counts of them (no log tails).
    cluster = (cluster_for_detail(queryset) if nodes is None else with_nodes(cluster_for_list(queryset).select_related("volume"))).first()
    if cluster is None:
        return [], after
    context = _push_context(cluster)
    parts = [_render("status-card", context)]
    if nodes is None:
        parts.append(_render("nodes-table", context))
        parts.append(_render("connect-card", {**context, "connect": connect.page_context(cluster)}))
    events_html, newest = _new_events(cluster, context, after)
    parts.append(events_html)
    messages = ["".join(parts)]
    if nodes:
        rows = nodes_by_id(cluster_id, nodes)
        if rows:
            messages.append("".join(_render("node-row", {**context, "node": node, "row_oob": True}).strip() for node in rows))
    return messages, newest


def render_cluster_row(cluster_id: int) -> str:
    """The cluster's row of the clusters list."""
    cluster = cluster_for_list(Cluster.objects.filter(pk=cluster_id)).first()
    if cluster is None:
        return ""
    return render_to_string("clusters/list.html#cluster-row", _push_context(cluster))


def current_cluster_detail(cluster_id: int) -> str:
    """The detail page's live parts as one string (what a socket receives on joining)."""
    messages, _ = render_cluster_now(cluster_id)
    return "".join(messages)


def broadcast_network(cluster_id: int) -> None:
    """After a commit: the cluster's network test changed (a round of pairs, its outcome)."""
    send_to_group(cluster_group(cluster_id), {"type": NETWORK_CHANGED, "cluster_id": cluster_id})


def render_network_card(cluster_id: int) -> str:
    """The Network card as it is now, swapped in by id."""
    from clusters import network_tests

    cluster = Cluster.objects.select_related("machine_type").filter(pk=cluster_id).first()
    if cluster is None:
        return ""
    context = _push_context(cluster, network=network_tests.card(cluster))
    return render_to_string("clusters/network.html#network-card", context)
