"""A cluster's way to ready, as the lifecycle records it: the nodes' progress and log tails,
every machine joined (billing starts), ready, degraded, failed; and the customer's retry of a
degraded install."""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

from django.db import connection, models, transaction
from django.db.models import F
from django.utils import timezone

from audit.recording import Action
from billing import services as billing
from clusters import emails as cluster_emails
from clusters.errors import Conflict
from clusters.models import Cluster, Node, NodeHealth, NodeStep, Reason, Software, Status
from clusters.network_test.services import network_test_after_ready
from clusters.services.common import SYSTEM, after_commit_changed, record_event, transition
from config.bulk import lock_rows, update_rows
from offers import inventory


def update_nodes(cluster_id: int, changes: Iterable[tuple[Node, dict]]) -> None:
    """Record the progress of several nodes of one cluster with a single live push, which
    carries those nodes' rows (one push per node would make a 64-node pass push 64 times).
    Nodes changing the same fields go in one UPDATE (config.bulk)."""
    changes = list(changes)
    if not changes:
        return
    by_fields: dict[tuple[str, ...], list[Node]] = {}
    for node, fields in changes:
        for key, value in fields.items():
            setattr(node, key, value)
        by_fields.setdefault(tuple(sorted(fields)), []).append(node)
    with transaction.atomic():
        # Node rows in id order (the lock order in docs/architecture.md).
        for names, nodes in by_fields.items():
            update_rows(Node, sorted(nodes, key=lambda n: n.pk), list(names))
        after_commit_changed(cluster_id, nodes=[node.pk for node, _ in changes])


NUL = "\x00"


def append_node_logs(cluster_id: int, lines_by_node: dict[int, list[tuple[str, str]]], *, keep: int = Node.LOG_KEEP) -> None:
    """Add (step, line) output to each node's log tail and note the step it is on; one push."""
    if not lines_by_node:
        return
    stamp = timezone.now().strftime("%H:%M:%S")
    # A program's output may hold NUL bytes (a binary cat, a progress bar); no text column
    # stores them, and a refused write would lose the lines around them.
    texts = {pk: "".join(f"[{stamp}] {step}: {line.replace(NUL, '')}\n" for step, line in entries
                         if line.replace(NUL, "").strip())
             for pk, entries in lines_by_node.items()}
    # Output arrives after the fact; it must not relabel a node that has settled, nor one
    # whose install finished (it is only checked from then on). Only the label: the lifecycle
    # decides on installed_at, so a late line cannot make it install again.
    steps = {pk: entries[-1][0][:40] for pk, entries in lines_by_node.items()}
    with transaction.atomic():
        if connection.vendor == "postgresql":
            changed = _append_in_place(texts, steps, keep)
        else:
            changed = _append_here(texts, steps, keep)
        after_commit_changed(cluster_id, nodes=changed)


def _append_in_place(texts: dict[int, str], steps: dict[int, str], keep: int) -> list[int]:
    """PostgreSQL appends and trims each tail itself: only the new lines travel, not 64 tails
    of LOG_KEEP characters read out and written back (half an install push's cost at 64
    machines). The rows are locked in id order first (the lock order in docs/architecture.md)."""
    meta = Node._meta
    quote = connection.ops.quote_name
    table = quote(meta.db_table)
    key, tail, written, step, state, installed_at = (
        quote(str(cast(models.Field, meta.get_field(name)).column)) for name in ("id", "log_tail", "log_written", "step", "state", "installed_at")
    )
    ids = sorted(texts)
    lock_rows(Node, ids)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS t SET {tail} = right(t.{tail} || v.text, %s), {written} = t.{written} + v.length, "
            f"{step} = CASE WHEN t.{state} <> ALL(%s) AND t.{installed_at} IS NULL THEN v.step ELSE t.{step} END "
            "FROM (SELECT unnest(%s::bigint[]) AS id, unnest(%s::text[]) AS text, unnest(%s::bigint[]) AS length, "
            f"unnest(%s::text[]) AS step) AS v WHERE t.{key} = v.id RETURNING t.{key}",
            [keep, [str(s) for s in Node.SETTLED_STATES], ids, [texts[pk] for pk in ids],
             [len(texts[pk]) for pk in ids], [steps[pk] for pk in ids]],
        )
        return sorted(row[0] for row in cursor.fetchall())


def _append_here(texts: dict[int, str], steps: dict[int, str], keep: int) -> list[int]:
    """The same on a database without PostgreSQL's arrays (SQLite, `make run`)."""
    # Only the node rows, in id order: Node's default ordering joins the cluster, and a FOR
    # UPDATE over that join would lock the cluster row too, against the lock order (cluster
    # before nodes) that terminate and mark_degraded take.
    nodes = list(
        Node.objects.select_for_update(of=("self",)).filter(pk__in=list(texts))
        .only("log_tail", "log_written", "state", "step", "installed_at").order_by("pk")
    )
    for node in nodes:
        node.log_tail = (node.log_tail + texts[node.pk])[-keep:]
        node.log_written += len(texts[node.pk])
        if node.state not in Node.SETTLED_STATES and node.installed_at is None:
            node.step = steps[node.pk]
    update_rows(Node, nodes, ["log_tail", "log_written", "step"], locked=True)
    return [node.pk for node in nodes]


def mark_joined(cluster: Cluster, nodes: list[Node]) -> bool:
    """Every machine is up and reaches every other: billing starts now, at one instant for all."""
    with transaction.atomic():
        now = timezone.now()
        next_status = Status.READY if cluster.software == Software.NONE else Status.INSTALLING
        extra = {"ready_at": now} if next_status == Status.READY else {}
        if not transition(cluster, [Status.PROVISIONING], next_status, billing_started_at=now, **extra):
            return False
        node_state = Node.State.READY if next_status == Status.READY else Node.State.JOINED
        Node.objects.filter(cluster=cluster, released_at__isnull=True).update(
            state=node_state, joined_at=now, billing_started_at=now, detail="",
            **({"ready_at": now, "step": NodeStep.READY} if node_state == Node.State.READY else {"step": NodeStep.JOINED}),
        )
        billing.start_usage(cluster, nodes, now)
        record_event(cluster, "joined", f"All {len(nodes)} machines joined the private network 10.77.0.0/24; billing started.")
        if next_status == Status.READY:
            _announce_ready(cluster)
        after_commit_changed(cluster.pk, advance=next_status == Status.INSTALLING)
        return True


def _announce_ready(cluster: Cluster) -> None:
    software = "" if cluster.software == Software.NONE else f", {cluster.get_software_display()}"
    record_event(cluster, "ready", f"{cluster.name} is ready: {cluster.machine_count} machines{software}.")
    cluster_emails.notify_ready(cluster)
    network_test_after_ready(cluster)


def mark_ready(cluster: Cluster) -> bool:
    with transaction.atomic():
        if not transition(cluster, [Status.INSTALLING], Status.READY, ready_at=timezone.now()):
            return False
        Node.objects.filter(cluster=cluster, released_at__isnull=True).update(
            state=Node.State.READY, ready_at=timezone.now(), step=NodeStep.READY
        )
        _announce_ready(cluster)
        after_commit_changed(cluster.pk)
        return True


def mark_degraded(cluster: Cluster, failed: dict[str, str], *, from_status: str = Status.INSTALLING) -> bool:
    """The software failed after every machine was up: machines stay up and billed. From
    `installing`, or from `ready` when a worker added to a running cluster fails its install."""
    with transaction.atomic():
        if not transition(cluster, [from_status], Status.DEGRADED):
            return False
        broken = [
            node for node in cluster.nodes.filter(released_at__isnull=True).only("cluster_id", "index").order_by("pk")
            if node.name in failed
        ]
        for node in broken:
            node.state, node.detail = Node.State.INSTALL_FAILED, failed[node.name][:255]
        update_rows(Node, broken, ["state", "detail"])
        # Their machines stay up for the customer; the hosts leave sale once they are let go.
        inventory.quarantine_hosts(
            {node.host_id: f"install failed in cluster #{cluster.pk} ({node.name}): {failed[node.name]}" for node in broken}
        )
        # The others finished their part: they say so, not "Installing" for as long as it lasts.
        Node.objects.filter(
            cluster=cluster, released_at__isnull=True, state__in=[Node.State.INSTALLING, Node.State.JOINED]
        ).exclude(pk__in=[n.pk for n in broken]).update(state=Node.State.INSTALLED, step=NodeStep.INSTALLED, detail="")
        summary = "; ".join(f"{name}: {msg}" for name, msg in sorted(failed.items()))
        record_event(
            cluster, "degraded",
            f"{cluster.get_software_display()} failed to install ({summary}). Machines stay up and billed: "
            "retry the install or terminate the cluster.",
            reason=Reason.INSTALL_FAILED,
        )
        cluster_emails.notify_degraded(cluster)
        after_commit_changed(cluster.pk)
        return True


def fail_cluster(cluster: Cluster, reason: str, message: str, node_details: dict[str, str] | None = None) -> bool:
    """All or nothing: a cluster that never had every machine up is failed, released, and never billed."""
    with transaction.atomic():
        if not transition(cluster, [Status.PROVISIONING], Status.FAILED, failure_reason=reason, terminated_at=timezone.now()):
            return False
        now = timezone.now()
        node_details = node_details or {}
        nodes = list(cluster.nodes.only("cluster_id", "index", "detail", "host_id").order_by("pk"))
        for node in nodes:
            node.state = Node.State.FAILED if node.name in node_details else Node.State.RELEASED
            node.detail = node_details.get(node.name, node.detail)[:255]
            node.released_at, node.step = now, NodeStep.RELEASED
            node.health, node.health_detail = NodeHealth.UNKNOWN, ""  # a stopped machine has no health
        update_rows(Node, nodes, ["state", "detail", "released_at", "step", "health", "health_detail"])
        _quarantine_blamed(cluster, nodes, node_details)
        inventory.release_hosts([node.host_id for node in nodes])
        record_event(
            cluster, "failed", f"{message.rstrip('. ')}. Every machine was released; nothing was charged.", reason=reason
        )
        cluster_emails.notify_failed(cluster)
        after_commit_changed(cluster.pk)
        return True


def _quarantine_blamed(cluster: Cluster, nodes: list[Node], node_details: dict[str, str]) -> None:
    """The hosts whose machine did not start or join leave sale, so a re-create (or another
    customer) is never placed on them again. When every machine is blamed alike (none came up
    or none reached any other) the fault is not any one host's, and none is quarantined."""
    blamed = [node for node in nodes if node.name in node_details]
    if not blamed or (len(blamed) == len(nodes) > 1):
        return
    inventory.quarantine_hosts(
        {node.host_id: f"failed in cluster #{cluster.pk} ({node.name}): {node_details[node.name]}" for node in blamed}
    )


def retry_install(cluster: Cluster, *, actor: str = SYSTEM) -> None:
    with transaction.atomic():
        # Counted on the row: `cluster` may be a stale read.
        if Node.objects.filter(cluster=cluster, released_at__isnull=True, replacing__isnull=False).exists():
            raise Conflict("replacement_in_progress",
                           f"A node of {cluster.name} is being replaced; retry the install once the new machine has taken over.")
        if not transition(cluster, [Status.DEGRADED], Status.INSTALLING, install_attempts=F("install_attempts") + 1):
            raise Conflict("not_degraded", f"Only a degraded cluster can retry its install; this one is {cluster.status}.")
        cluster.refresh_from_db(fields=["install_attempts"])
        Node.objects.filter(cluster=cluster, released_at__isnull=True).update(
            state=Node.State.JOINED, detail="", installed_at=None, step=NodeStep.INSTALL_QUEUED
        )
        record_event(cluster, "install_retried", f"Retrying the {cluster.get_software_display()} install.", actor=actor,
                     audit=Action("cluster.retry_install", {"status": Status.DEGRADED}, {"status": Status.INSTALLING}))
        after_commit_changed(cluster.pk, advance=True)
