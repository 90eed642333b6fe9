"""Live status, the consumers' half: each socket renders what its page lacks.

The committing thread only sends a small notice after the commit (clusters.notices: "cluster
7 changed, nodes 3 and 4"). The consumer holding each socket renders what its page lacks,
off that thread, as Baserow's ws tasks do: the status card, the node rows that changed (the
whole nodes table and the connect card when every node did), and the events recorded since
its last push, at most a window of them. A push is therefore bounded by the cluster's size,
never by its history: a cluster with 5,000 events pushes as much as one with 6.

Only the consumers import this module: nothing that changes a cluster renders a page.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from django.dispatch import receiver
from django.template.loader import get_template, render_to_string
from django.utils.autoreload import file_changed

from clusters import connect
from clusters.models import Cluster, Node, Status
from clusters.network_test import card
from clusters.queries import EVENTS_WINDOW, cluster_for_list, cluster_for_push, log_tails, recent_events

# What a node row is rendered from, besides its cluster: every column of the node but the
# log (its length and how much was ever written to it are compared instead: a push never
# reads 64 logs to find the one that grew), and the time of the last health check, of which
# only whether there was one counts: a round re-sends the rows whose health it changed, not
# every row for a newer time.
_ROW_FIELDS = tuple(
    f.attname for f in Node._meta.concrete_fields if f.attname not in ("log_tail", "log_written", "health_checked_at")
)
NO_LOG = (0, 0)
# The row's cells a push may send alone, and the node columns each one shows. When only
# these columns of a row changed (and nothing the row reads from its cluster), the page gets
# those cells, not the row: a progress pass or a status change that every node follows
# moves the State and Step cells of 64 rows (~200 bytes a row, not ~500).
_CELLS = {"node-state-cell": ("state", "detail"), "node-step-cell": ("step",)}
_CELL_OF = {_ROW_FIELDS.index(name): cell for cell, names in _CELLS.items() for name in names}
# Columns no row shows (bookkeeping times, the host, the key): when they change, with or
# without the cells above, the row itself looks the same and is not re-sent for them
# (tests/core/test_pushes.py renders a row before and after changing them all).
UNSHOWN = (
    "workspace_id", "host_id", "address", "boot_requested_at", "up_at", "joined_at", "billing_started_at",
    "billing_ended_at", "peers_reached_at", "installed_at", "ready_at", "host_key", "health_changed_at",
)
_CELL_OF.update({_ROW_FIELDS.index(name): "" for name in UNSHOWN})
# Rendered rows and cells, shared by the sockets of this process: a push that reaches five
# viewers of one cluster renders each changed row once. Keyed by everything the HTML is made
# of (the node's columns, the check time, what it reads from the cluster, its log state).
_RENDERED: dict[tuple, str] = {}
_RENDERED_MAX = 4096


@dataclass
class PageState:
    """What one socket's page shows, so that a push sends only what differs from it.

    Kept by the consumer per socket (pages of one cluster differ in what they were last
    sent): the newest event, the node rows in page order and what each was rendered from,
    how much of each node's log it holds ((characters written, tail length), see Node.log_written)
    and the digest of the Connect card.
    """

    last_event_id: int | None = None
    rows: tuple[str, ...] = ()
    row_keys: dict[int, tuple] = field(default_factory=dict)
    logs: dict[int, tuple[int, int]] = field(default_factory=dict)
    connect: str = ""


def _cluster_row_key(cluster: Cluster) -> tuple:
    """What a node row reads from its cluster (the node-row partial and _replace_node.html):
    health shows on a ready cluster only, and the node being swapped says so. A change here
    re-renders every row; any other cluster change (progress, cost, events) none. Whether
    Replace is offered is not a row's: the status card says it once (data-replace-nodes)."""
    swapping = cluster.node_being_replaced
    return (cluster.status == Status.READY, swapping.replacing_id if swapping else None)


def _push_context(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    # Pushed HTML is shared by every viewer, so it carries no CSRF token of its own: its
    # forms post with hx-post, and htmx sends the page's token from <body hx-headers>.
    return {"cluster": cluster, "oob": True, "csrf_token": "NOTPROVIDED", **extra}


def _rows_context(cluster: Cluster, context: dict) -> dict[str, Any]:
    """What every row reads from the cluster, read once for all rows (nodes-table does the
    same with {% with %}): walking the nodes once per row made a 64-row push quadratic."""
    swapping = cluster.node_being_replaced
    return {**context, "swapping_id": swapping.replacing_id if swapping else None}


def _render(name: str, context: dict) -> str:
    template = _TEMPLATES.get(name)
    if template is None:
        template = _TEMPLATES[name] = get_template(f"clusters/detail.html#{name}")
    return template.render(context)


# The detail page's partials, looked up once per process (a push renders up to 128 cells;
# the loader's lookup was a third of a cell's time). Emptied when a template file changes
# (the development server's autoreload), as Django's own cached loader is.
_TEMPLATES: dict[str, Any] = {}


@receiver(file_changed)
def _forget_templates(sender: Any, file_path: Any, **kwargs: Any) -> None:
    _TEMPLATES.clear()
    _RENDERED.clear()


def _digest(html: str) -> str:
    return hashlib.md5(html.encode(), usedforsecurity=False).hexdigest()


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


def _log_state(node: Node) -> tuple[int, int]:
    return node.log_written, node.log_length  # type: ignore[attr-defined]


def _row_keys(cluster: Cluster, nodes: list[Node]) -> dict[int, tuple]:
    cluster_key = _cluster_row_key(cluster)
    return {node.pk: (_row_fields(node), cluster_key) for node in nodes}


def _remember_rows(page: PageState, nodes: list[Node], keys: dict[int, tuple]) -> None:
    page.rows = tuple(node.row_id for node in nodes)
    page.row_keys = keys
    page.logs = {node.pk: _log_state(node) for node in nodes}


def _row_fields(node: Node) -> tuple:
    return (*(getattr(node, name) for name in _ROW_FIELDS), node.health_checked_at is not None)


def _load_logs(nodes: list[Node]) -> None:
    """Read the log tails of `nodes` (deferred by cluster_for_push), one query for all."""
    logs = log_tails([node.pk for node in nodes if node.log_length])  # type: ignore[attr-defined]
    for node in nodes:
        node.log_tail = logs.get(node.pk, "")


def _nodes_table(cluster: Cluster, nodes: list[Node], context: dict, page: PageState) -> str:
    """Every row, then every log's text: for a socket that just joined, or a page whose rows
    are others than these. The rows' logs are preserved, so one the reader has open stays
    open; their text follows the table and replaces the page's."""
    _load_logs(nodes)
    _remember_rows(page, nodes, _row_keys(cluster, nodes))
    table = _render("nodes-table", {**context, "logs_apart": True})
    logs = "".join(_render("node-log", {**context, "node": node, "log_oob": "true"}) for node in nodes if node.log_tail)
    return table + logs


def _changed_rows(cluster: Cluster, nodes: list[Node], context: dict, page: PageState) -> tuple[str, str, str]:
    """The rows whose node (or what rows read from the cluster) changed since the page's
    last push, and the lines its logs lack: (log swaps, rows, cells). A row is re-sent
    without its log when the page holds a log for it (hx-preserve keeps the page's, open or
    closed); a row whose change is only its state, detail or step sends those cells alone
    (`_changed_cells`); a log's new lines travel alone, appended to the page's (the whole
    tail when the page missed more than the tail keeps). Rows and cells come from
    `_RENDERED` when another socket of this process rendered them already."""
    keys = _row_keys(cluster, nodes)
    rows: list[tuple[Node, bool]] = []  # (node, the page keeps its log)
    cells: list[tuple[Node, tuple[str, ...]]] = []  # (node, the cells that changed)
    grown: list[tuple[Node, int]] = []  # (node, characters the page lacks)
    for node in nodes:
        (written, length), (shown_written, shown_length) = _log_state(node), page.logs.get(node.pk, NO_LOG)
        if bool(length) != bool(shown_length):
            rows.append((node, False))  # a log appears (or goes): the row brings its <details>
            continue
        if written != shown_written:
            grown.append((node, written - shown_written))
        shown = page.row_keys.get(node.pk)
        if shown != keys[node.pk]:
            changed = _changed_cells(node, shown, keys[node.pk])
            if changed is None:
                rows.append((node, bool(length)))
            elif changed:
                cells.append((node, changed))
    _load_logs([node for node, _ in grown] + [node for node, kept in rows if not kept])
    _remember_rows(page, nodes, keys)
    swaps = []
    for node, missing in grown:
        if 0 < missing < len(node.log_tail):
            swaps.append(_render("node-log", {**context, "node": node, "log_oob": "beforeend", "log_append": node.log_tail[-missing:]}))
        else:
            swaps.append(_render("node-log", {**context, "node": node, "log_oob": "true"}))
    if not rows and not cells:
        return "".join(swaps), "", ""
    row_context = _rows_context(cluster, context)
    rows_html = "".join(_row(node, kept, keys[node.pk], row_context) for node, kept in rows)
    cells_html = "".join(_cell(node, cell, keys[node.pk], row_context) for node, changed in cells for cell in changed)
    return "".join(swaps), rows_html, cells_html


def _changed_cells(node: Node, shown: tuple | None, now: tuple) -> tuple[str, ...] | None:
    """The cells that tell a row's change, or None when the row must travel whole: only
    when what the row reads from its cluster is the same and every changed column is one a
    State or Step cell shows, or one no row shows (then no cell for it: () when nothing the
    page shows changed). A machine being swapped in shows its state in its name cell too,
    so its row travels whole."""
    if shown is None or shown[1] != now[1] or node.is_replacement:
        return None
    cells: set[str] = set()
    for i, (before, after) in enumerate(zip(shown[0], now[0], strict=True)):
        if before != after:
            cell = _CELL_OF.get(i)
            if cell is None:
                return None
            if cell:
                cells.add(cell)
    return tuple(sorted(cells))


def _cached(key: tuple, render: Any) -> str:
    html = _RENDERED.get(key)
    if html is None:
        if len(_RENDERED) >= _RENDERED_MAX:
            _RENDERED.clear()
        html = _RENDERED[key] = render()
    return html


def _row(node: Node, kept: bool, key: tuple, context: dict) -> str:
    render = lambda: _render("node-row", {**context, "node": node, "row_oob": True, "log_kept": kept}).strip()  # noqa: E731
    if not kept and node.log_tail:
        return render()  # carries its whole log: rare (a log appears), not worth keeping
    return _cached(("node-row", node.pk, key, node.health_checked_at, kept), render)


def _cell(node: Node, cell: str, key: tuple, context: dict) -> str:
    return _cached((cell, node.pk, key), lambda: _render(cell, {**context, "node": node, "cell_oob": True}))


def render_cluster_now(cluster_id: int, page: PageState) -> list[str]:
    """Every live part of the detail page as it is now, for a socket that just joined."""
    page.rows, page.row_keys, page.logs, page.connect, page.last_event_id = (), {}, {}, "", None
    return render_cluster_changes(cluster_id, None, page)


def render_cluster_changes(cluster_id: int, nodes: list[int] | None, page: PageState) -> list[str]:
    """What `page` lacks once `nodes` (None: the cluster) changed; `page` is updated to match.

    The status card always; the events recorded since the page's newest; the node rows that
    differ from what the page was sent (all of them in the whole table only when the page's
    rows are others: a node added, replaced or released), each without its log when the page
    holds it; a log's new lines alone; the Connect card on a cluster change, when it
    differs. Table rows travel in a message of their own, and cells in one more: htmx
    parses a message by its first tag, and a <tr> after a <section> (or a <td> after a
    <tr>) would be dropped by the HTML parser.
    """
    cluster = cluster_for_push(Cluster.objects.filter(pk=cluster_id), hosts=nodes is None).first()
    if cluster is None:
        return []
    context = _push_context(cluster)
    live = list(cluster.nodes.all())
    parts = [_render("status-card", context)]
    rows = cells = ""
    if page.rows != tuple(node.row_id for node in live):
        parts.append(_nodes_table(cluster, live, context, page))
    else:
        swaps, rows, cells = _changed_rows(cluster, live, context, page)
        parts.append(swaps)
    if nodes is None:
        connect_card = _render("connect-card", {**context, "connect": connect.page_context(cluster)})
        if _digest(connect_card) != page.connect:
            page.connect = _digest(connect_card)
            parts.append(connect_card)
    if nodes is None and cluster.never_started:
        # Its machines never reported and never will: the Metrics card stops waiting for figures.
        parts.append(render_to_string("clusters/_metrics_card.html", context))
    events_html, page.last_event_id = _new_events(cluster, context, page.last_event_id)
    parts.append(events_html)
    messages = ["".join(parts)]
    if rows:
        messages.append(rows)
    if cells:
        messages.append(cells)
    return messages


def render_cluster_row(cluster_id: int) -> str:
    """The cluster's row of the clusters list."""
    cluster = cluster_for_list(Cluster.objects.filter(pk=cluster_id)).first()
    if cluster is None:
        return ""
    return render_to_string("clusters/list.html#cluster-row", _push_context(cluster))


def render_network_card(cluster_id: int) -> str:
    """The Network card as it is now, swapped in by id."""
    cluster = Cluster.objects.select_related("machine_type").filter(pk=cluster_id).first()
    if cluster is None:
        return ""
    context = _push_context(cluster, network=card.card(cluster))
    return render_to_string("clusters/network.html#network-card", context)
