"""A live push carries what changed since the page's last one: the rows of the nodes that
changed, without the logs the page holds, and a log's new lines alone."""

from __future__ import annotations

import pytest
from django.utils import timezone

from clusters.live import PageState, render_cluster_changes, render_cluster_now
from clusters.models import Cluster, Node, NodeStep, Status
from clusters.services.progress import append_node_logs, mark_degraded
from offers.models import Host
from tests.factories import HostFactory

pytestmark = pytest.mark.django_db

LOG = "".join(f"[12:00:{i % 60:02d}] install: a line of installer output, number {i}\n" for i in range(80))[-4000:]


def big_cluster(environment, machine_type, *, machines: int = 64, status: str = Status.READY,
                state: str = Node.State.READY) -> Cluster:
    """A cluster whose every node has a full 4,000-character log tail, as after an install."""
    now = timezone.now()
    cluster = Cluster.objects.create(
        workspace_id=environment.workspace_id, environment=environment, name="wide", machine_type=machine_type,
        machine_count=machines, price_per_machine_hour=machine_type.price_per_machine_hour, provider="simulated",
        status=status, status_changed_at=now, deadline_at=now, software="slurm",
    )
    hosts = Host.objects.bulk_create(
        HostFactory.build(machine_type=machine_type, state=Host.State.RESERVED) for _ in range(machines)
    )
    Node.objects.bulk_create(
        Node(cluster=cluster, index=i, host=hosts[i], state=state, log_tail=LOG, log_written=len(LOG))
        for i in range(machines)
    )
    return cluster


def joined(cluster: Cluster) -> PageState:
    page = PageState()
    render_cluster_now(cluster.pk, page)
    return page


def pushed_bytes(messages: list[str]) -> int:
    return sum(len(message.encode()) for message in messages)


def test_a_status_change_that_no_row_shows_sends_no_row(environment, machine_type):
    # Every machine joined: the cluster moves on to installing, and no node's row changes.
    cluster = big_cluster(environment, machine_type, status=Status.PROVISIONING, state=Node.State.INSTALLED)
    page = joined(cluster)
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.INSTALLING)
    messages = render_cluster_changes(cluster.pk, None, page)
    assert len(messages) == 1 and "<tr" not in messages[0] and 'id="nodes-table"' not in messages[0]
    assert "Installing" in messages[0] and pushed_bytes(messages) < 5_000


def test_a_64_node_progress_push_sends_the_state_and_step_cells_alone_and_stays_small(environment, machine_type):
    cluster = big_cluster(environment, machine_type, status=Status.PROVISIONING, state=Node.State.BOOTING)
    page = joined(cluster)
    Node.objects.filter(cluster=cluster).update(state=Node.State.UP, step="up", up_at=timezone.now())
    card, cells = render_cluster_changes(cluster.pk, list(cluster.nodes.values_list("pk", flat=True)), page)
    assert "<tr" not in card + cells and "installer output" not in card + cells
    assert cells.count('<td data-label="State" id="node-') == 64 and cells.count('<td data-label="Step" id="node-') == 64
    assert '<td data-label="State" id="node-63-state" hx-swap-oob="true"><div><span class="status status-up">Up</span>' in cells
    assert "64 of 64 machines up" in card
    assert pushed_bytes([card, cells]) < 20_000


def test_a_change_every_row_reads_from_the_cluster_sends_64_rows_without_their_logs(environment, machine_type):
    cluster = big_cluster(environment, machine_type, status=Status.INSTALLING)
    page = joined(cluster)
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.READY)  # Replace is offered on every row
    card, rows = render_cluster_changes(cluster.pk, None, page)
    assert rows.count("<tr ") == 64 and rows.count("hx-preserve") == 64 and rows.count(">Replace node-") == 63
    assert "installer output" not in card + rows
    # Each row carries its Replace form without the question it asks (the page holds that
    # once), and none of the 64 logs (4 KB each).
    assert "A new " not in rows
    assert pushed_bytes([card, rows]) < 100_000


def test_a_64_node_degrade_sends_the_changed_cells_and_offers_replace_once_under_50_kb(environment, machine_type):
    cluster = big_cluster(environment, machine_type, status=Status.INSTALLING, state=Node.State.INSTALLING)
    page = joined(cluster)
    mark_degraded(Cluster.objects.get(pk=cluster.pk), {"node-0": "slurmd did not start"})
    messages = render_cluster_changes(cluster.pk, None, page)
    card, cells = messages
    assert 'id="connect-card"' in card and "Degraded" in card and "<tr id=" not in cells
    # Every node's state; the step of each node but the one that failed (its step stays).
    assert cells.count('data-label="State" id="node-') == 64 and cells.count('data-label="Step" id="node-') == 63
    assert "Install failed" in cells and "slurmd did not start" in cells
    # The workers can be replaced now: the status card says so once, for the Replace form every
    # worker's row holds already (the question it asks is the page's, once, too).
    assert 'id="status-card" hx-swap-oob="true" data-replace-nodes' in card
    assert "Replace node-" not in cells and "A new " not in cells
    assert pushed_bytes(messages) < 50_000


def test_columns_no_row_shows_send_nothing_and_do_not_change_the_row(environment, machine_type):
    from clusters import live

    cluster = big_cluster(environment, machine_type, machines=2, status=Status.INSTALLING, state=Node.State.INSTALLING)
    page = joined(cluster)
    node = Cluster.objects.get(pk=cluster.pk).nodes.get(index=1)

    def row() -> str:
        fresh = cluster_for_row(cluster.pk)
        nodes = list(fresh.nodes.all())
        _, rows, _ = live._changed_rows(fresh, nodes, live._push_context(fresh), PageState(
            rows=tuple(n.row_id for n in nodes), logs={n.pk: (n.log_written, n.log_length) for n in nodes},  # type: ignore[attr-defined]
        ))
        return rows.split('<tr id="node-1"')[1]

    before = row()
    now = timezone.now()
    changes: dict[str, object] = {name: now for name in live.UNSHOWN if name.endswith("_at")}
    changes.update(address="203.0.113.9", host_key="ssh-ed25519 AAAAC3Nza", host=HostFactory(machine_type=machine_type))
    Node.objects.filter(pk=node.pk).update(**changes)
    assert row() == before
    [card] = render_cluster_changes(cluster.pk, [node.pk], page)
    assert "node-1" not in card


def cluster_for_row(cluster_id: int) -> Cluster:
    from clusters.queries import cluster_for_push

    return cluster_for_push(Cluster.objects.filter(pk=cluster_id), hosts=False).get()


def test_sockets_of_one_cluster_share_the_rendered_rows(environment, machine_type, monkeypatch):
    from clusters import live

    cluster = big_cluster(environment, machine_type, machines=8, status=Status.INSTALLING)
    pages = [joined(cluster) for _ in range(3)]
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.READY)
    rendered: list[str] = []
    real = live._render

    def counted(name: str, context: dict) -> str:
        rendered.append(name)
        return real(name, context)

    monkeypatch.setattr(live, "_render", counted)
    pushes = [render_cluster_changes(cluster.pk, None, page) for page in pages]
    assert rendered.count("node-row") == 8
    assert pushes[0][1] == pushes[1][1] == pushes[2][1] and pushes[0][1].count("<tr ") == 8


def test_new_log_lines_travel_alone_and_the_row_keeps_the_pages_log(environment, machine_type):
    cluster = big_cluster(environment, machine_type, machines=8, status=Status.INSTALLING, state=Node.State.INSTALLING)
    page = joined(cluster)
    node = cluster.nodes.get(index=3)
    append_node_logs(cluster.pk, {node.pk: [(NodeStep.of_operation("starting_slurmd"), "slurmd: started")]})
    card, rows = render_cluster_changes(cluster.pk, [node.pk], page)
    assert '<pre class="log" id="node-3-log-text" data-keep="4000" hx-swap-oob="beforeend">' in card
    assert "Starting slurmd: slurmd: started\n</pre>" in card and "installer output" not in card
    # The step changed with the line: that cell alone, not the row with its log.
    assert rows == '<td data-label="Step" id="node-3-step" hx-swap-oob="true">Starting slurmd</td>'
    assert "installer output" not in rows
    # The same lines are not sent twice.
    assert "slurmd: started" not in "".join(render_cluster_changes(cluster.pk, [node.pk], page))


def test_a_page_that_missed_more_than_the_tail_gets_the_whole_tail(environment, machine_type):
    cluster = big_cluster(environment, machine_type, machines=2, status=Status.INSTALLING, state=Node.State.INSTALLING)
    page = joined(cluster)
    node = cluster.nodes.get(index=1)
    append_node_logs(cluster.pk, {node.pk: [("install", f"line {i} " + "x" * 60) for i in range(80)]})
    card, _ = render_cluster_changes(cluster.pk, [node.pk], page)
    log = card.split('<pre class="log" id="node-1-log-text" data-keep="4000" hx-swap-oob="true">')[1].split("</pre>")[0]
    node.refresh_from_db()
    assert len(log) == 4000 and log == node.log_tail


def test_a_node_that_gets_its_first_log_line_sends_its_row_with_the_log(environment, machine_type):
    cluster = big_cluster(environment, machine_type, machines=2, status=Status.INSTALLING, state=Node.State.INSTALLING)
    Node.objects.filter(cluster=cluster, index=1).update(log_tail="", log_written=0)
    page = joined(cluster)
    node = cluster.nodes.get(index=1)
    append_node_logs(cluster.pk, {node.pk: [("install", "first line")]})
    card, rows = render_cluster_changes(cluster.pk, [node.pk], page)
    assert "first line" not in card
    assert '<details id="node-1-log"><summary>Log</summary>' in rows and "install: first line" in rows


def test_a_health_round_that_changes_nothing_shown_sends_no_row(environment, machine_type):
    cluster = big_cluster(environment, machine_type, machines=8)
    Node.objects.filter(cluster=cluster).update(health="healthy", health_checked_at=timezone.now())
    page = joined(cluster)
    Node.objects.filter(cluster=cluster).update(health_checked_at=timezone.now())
    [card] = render_cluster_changes(cluster.pk, [], page)
    assert "<tr" not in card


def test_a_node_added_sends_the_whole_table(environment, machine_type):
    cluster = big_cluster(environment, machine_type, machines=2)
    page = joined(cluster)
    Node.objects.create(cluster=cluster, index=2, host=HostFactory(machine_type=machine_type), state=Node.State.BOOTING)
    [message] = render_cluster_changes(cluster.pk, None, page)
    assert 'id="nodes-table" hx-swap-oob="true"' in message and message.count('<tr id="node-') == 3
