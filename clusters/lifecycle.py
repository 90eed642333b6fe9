"""The reconciler: move a cluster one step toward its goal, safely, as often as asked.

Each pass reloads the cluster, holds its lease (so only one worker acts on it), asks the
provider where the machines are, and records what changed through clusters.services.
Running it twice, or after a worker died mid-step, only repeats idempotent provider calls.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import enum
import logging
import queue
import threading
import time

from django.conf import settings
from django.db import connections as db_connections
from django.db.models import Q
from django.utils import timezone

from clusters.beats import Beat
from clusters.models import Cluster, Node, NodeStep, Reason, Software, Status
from clusters.network_test.services import network_test_after_replace
from clusters.providers import BootState, Provider, StepOutcome, get_provider
from clusters.providers.base import StopNotice
from clusters.services.common import record_event
from clusters.services.lease import Lease, claim_lease, lease_length, release_lease, renew_lease, request_wake
from clusters.services.progress import (
    append_node_logs,
    fail_cluster,
    mark_degraded,
    mark_joined,
    mark_ready,
    update_nodes,
)
from clusters.services.replace import (
    fail_replacement,
    finish_replacement,
    mark_replacement_joined,
    mark_replacement_ready,
    record_drain,
)
from clusters.services.terminate import finish_termination
from clusters.services.wipe import record_wipe_receipts
from clusters.services.workers import mark_workers_joined, mark_workers_ready, release_worker

log = logging.getLogger(__name__)

INSTALL_TIMEOUT = dt.timedelta(minutes=30)


class Next(enum.Enum):
    AGAIN = "again"  # progressed; the next step can start now
    WAIT = "wait"  # waiting on machines; look again shortly
    DONE = "done"  # nothing more to do until a customer acts


class NodeOutput:
    """What the nodes print, written at most once a second. A provider calls back once per
    line, for every node at once, from the runner's node threads: those only hand the line to
    a queue, and one flusher thread (started by the first of them) writes it, so a node thread
    never waits on the database or on a lock held across a write. Output from the pass's own
    thread (the simulated provider) is written from that thread."""

    def __init__(self, cluster_id: int, nodes: list[Node], interval: float = 1.0) -> None:
        self.cluster_id = cluster_id
        # A machine being swapped in shares its node's name: the output of that name is its.
        self.ids = {node.name: node.pk for node in sorted(nodes, key=lambda n: n.replacing_id is not None)}
        self.interval = interval
        self.owner = threading.current_thread()
        self.lines: queue.SimpleQueue[tuple[int, str, str]] = queue.SimpleQueue()
        self.written_at = time.monotonic()
        self._flusher: threading.Thread | None = None
        self._starting = threading.Lock()
        self._closing = threading.Event()

    def __call__(self, node_name: str, step: str, text: str) -> None:
        node_id = self.ids.get(node_name)
        if node_id is None:
            return
        self.lines.put((node_id, NodeStep.of_operation(step), text))
        if threading.current_thread() is self.owner:
            if time.monotonic() - self.written_at >= self.interval:
                self._write()
        elif self._flusher is None:
            self._start_flusher()

    def _start_flusher(self) -> None:
        with self._starting:
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_until_closed, name=f"output-{self.cluster_id}",
                                                 daemon=True)
                self._flusher.start()

    def _flush_until_closed(self) -> None:
        try:
            while not self._closing.wait(self.interval):
                self._write()
        finally:
            # The flusher writes through a connection of its own: give it back now.
            db_connections.close_all()

    def _write(self) -> None:
        pending: dict[int, list[tuple[str, str]]] = {}
        while True:
            try:
                node_id, step, text = self.lines.get_nowait()
            except queue.Empty:
                break
            for line in text.splitlines() or [""]:
                pending.setdefault(node_id, []).append((step, line))
        self.written_at = time.monotonic()
        append_node_logs(self.cluster_id, pending)

    def close(self) -> None:
        """Stop the flusher and write whatever is left; the pass's thread calls it at step end."""
        self._closing.set()
        if self._flusher is not None:
            self._flusher.join()
        self._write()


class Heartbeat(Beat):
    """Renews a pass's lease every third of its length, so the lease can be short: a worker
    that dies stops renewing, and its cluster is free within seconds."""

    def __init__(self, lease: Lease) -> None:
        super().__init__(lease_length().total_seconds() / 3, name=f"lease-{lease.cluster_id}", beat=self._renew)
        self.lease = lease
        self.lost = False
        # Renewing and releasing both compare-and-set on the lease's expiry: never both at once.
        self._lock = threading.Lock()

    def _renew(self) -> bool:
        with self._lock:
            if self._stopped.is_set():
                return False
            if not renew_lease(self.lease):
                log.warning("cluster %s: the lease was lost mid-pass", self.lease.cluster_id)
                self.lost = True
                return False
            return True

    def release(self) -> bool:
        """Let go of the lease; False when a wake-up was asked for and the pass must go on."""
        with self._lock:
            released = release_lease(self.lease)
            if released:
                self._stopped.set()
            return released


def advance(cluster_id: int) -> dt.datetime | None:
    """Take every step that is possible now; returns when the cluster needs another look
    (None: not until someone acts)."""
    lease = claim_lease(cluster_id)
    if lease is None:
        # Another pass holds it: ask that holder to look again before it lets go. Claim once
        # more, in case it let go between our claim and the mark.
        request_wake(cluster_id)
        lease = claim_lease(cluster_id)
        if lease is None:
            return None
    with Heartbeat(lease) as heartbeat:
        while True:
            look_at = _take_steps(cluster_id, heartbeat)
            if heartbeat.lost or heartbeat.release():
                return look_at


def _next_look(cluster: Cluster, nodes: list[Node], provider: Provider) -> dt.datetime:
    """A waiting step looks again when its machines have news, as the provider's runtime
    tells (a booting machine is looked at when it is due up, not every poll), and no later
    than the cluster's provisioning deadline."""
    now = timezone.now()
    at = provider.news_at(cluster, nodes) or _poll()
    if cluster.status == Status.PROVISIONING:
        at = min(at, cluster.deadline_at)
    return max(at, now)


def _take_steps(cluster_id: int, heartbeat: Heartbeat) -> dt.datetime | None:
    # One provider for the whole pass: the steps it takes one after another (join, then
    # install, then the first readiness check) share what it keeps open, its SSH connections.
    provider: Provider | None = None
    with contextlib.ExitStack() as session:
        for _ in range(8):
            if heartbeat.lost:
                return _poll()
            cluster = Cluster.objects.select_related("machine_type", "environment", "volume").get(pk=cluster_id)
            step = STEPS.get(Status(cluster.status))
            if step is None:
                return None
            if provider is None:
                provider = get_provider(cluster.provider)
                session.enter_context(provider.session())
            nodes = list(cluster.nodes.select_related("host").filter(released_at__isnull=True))
            output = provider.on_output = NodeOutput(cluster.pk, nodes)
            try:
                outcome = step(cluster, nodes, provider)
            except Exception as exc:  # one bad pass must not wedge the cluster
                # Say so on the cluster and look again; the deadlines (provisioning, install)
                # still fail or degrade it if the error never goes away.
                log.exception("advancing cluster %s failed", cluster_id)
                _record_step_error(cluster, exc)
                return _poll()
            finally:
                output.close()
            if outcome is Next.DONE:
                return None
            if outcome is Next.WAIT:
                return _next_look(cluster, nodes, provider)
    return _poll()


def _poll() -> dt.datetime:
    return timezone.now() + dt.timedelta(seconds=settings.CLUSTER_POLL_SECONDS)


def _record_step_error(cluster: Cluster, exc: Exception) -> None:
    message = f"The control plane hit an error and will retry: {type(exc).__name__}: {exc}"[:500]
    last = cluster.events.order_by("-created_at", "-id").first()
    if last is None or last.message != message:
        record_event(cluster, "step_error", message, reason=Reason.PROVIDER_ERROR)


def _fail(cluster: Cluster, nodes: list[Node], provider: Provider, reason: str, message: str, details: dict[str, str]) -> Next:
    # Give the machines back before the cluster is marked failed: nothing may keep running.
    _stop_machines(cluster, nodes, provider)
    fail_cluster(cluster, reason, message, details)
    return Next.DONE


def _stop_machines(cluster: Cluster, nodes: list[Node], provider: Provider) -> None:
    try:
        provider.stop(cluster, nodes)
    except StopNotice as notice:
        record_event(cluster, "stop_notice", str(notice))
    except Exception as exc:  # a stop error must not keep machines reserved
        log.exception("stopping cluster %s failed", cluster.pk)
        record_event(cluster, "stop_error", f"The provider reported an error while stopping: {exc}")
    provider.release_all(nodes)
    if provider.gives_wipe_receipts:
        record_wipe_receipts(cluster, nodes, provider.wipe_receipts)


BOOT_FAILED_TEXT = "its machine did not start"


def _boot_failure(provider: Provider, node: Node, detail: str) -> str:
    """What the customer reads when a machine does not start: the provider's own words (host
    names, paths on its servers) go to the node's log, behind its Log toggle."""
    provider.on_output(node.name, "boot", detail or "failed to start")
    return BOOT_FAILED_TEXT


def _boot_and_poll(cluster: Cluster, nodes: list[Node], provider: Provider) -> tuple[Node, str] | None:
    """Ask pending machines to boot and record those now up, in one push; returns the first
    machine that failed to start (and why), leaving what to do about it to the caller."""
    now = timezone.now()
    pending = [node for node in nodes if node.state == Node.State.PENDING]
    provider.boot_all(pending)
    update_nodes(
        cluster.pk, [(node, {"state": Node.State.BOOTING, "boot_requested_at": now, "step": NodeStep.BOOTING}) for node in pending]
    )
    came_up = []
    failed = None
    booting = [node for node in nodes if node.state == Node.State.BOOTING]
    for node, report in zip(booting, provider.boot_statuses(booting), strict=True):
        if report.state is BootState.FAILED:
            failed = (node, _boot_failure(provider, node, report.detail))
            break
        if report.state is BootState.UP:
            came_up.append(
                (node, {"state": Node.State.UP, "up_at": timezone.now(), "address": report.address, "step": NodeStep.JOINING})
            )
    update_nodes(cluster.pk, came_up)
    return failed


def _minutes(count: int) -> str:
    return f"{count} minute{'' if count == 1 else 's'}"


def provision(cluster: Cluster, nodes: list[Node], provider: Provider) -> Next:
    now = timezone.now()
    if now >= cluster.deadline_at:
        minutes = cluster.machine_type.boot_deadline_minutes
        # Blame the machines that held the cluster up: still booting, or not reached by
        # every peer at the last join attempt (its outcome is kept in `detail`).
        late = {
            n.name: f"not up and joined after {minutes} min ({n.detail or n.get_state_display().lower()})"
            for n in nodes if n.state != Node.State.UP or n.detail
        } or {n.name: f"not joined after {minutes} min" for n in nodes}
        return _fail(
            cluster, nodes, provider, Reason.JOIN_TIMEOUT,
            f"Not every machine was up and reachable within {_minutes(cluster.machine_type.boot_deadline_minutes)} "
            f"({', '.join(sorted(late)) or 'all nodes'} late).",
            late,
        )
    failed = _boot_and_poll(cluster, nodes, provider)
    if failed:
        node, detail = failed
        return _fail(
            cluster, nodes, provider, Reason.BOOT_FAILED, f"{node.name} failed to start: {detail}", {node.name: detail}
        )
    if any(node.state != Node.State.UP for node in nodes):
        return Next.WAIT
    outcome = provider.join_network(cluster, nodes)
    if not outcome.ok:
        changes = []
        for node in nodes:
            stuck = outcome.failed.get(node.name) or ("not reached by every peer" if node.name in outcome.pending else "")
            fields: dict[str, object] = {"detail": stuck[:255]}
            if stuck:
                fields.update(peers_reached_at=None, step=NodeStep.WAITING_FOR_PEERS)
            else:
                fields.update(peers_reached_at=node.peers_reached_at or now, step=NodeStep.REACHES_EVERY_PEER)
            if any(getattr(node, key) != value for key, value in fields.items()):
                changes.append((node, fields))
        update_nodes(cluster.pk, changes)
        return Next.WAIT
    return Next.AGAIN if mark_joined(cluster, nodes) else Next.DONE


def _install_once(cluster: Cluster, nodes: list[Node], provider: Provider) -> StepOutcome:
    """Install on the nodes once: a node whose install finished (installed_at) waits on its
    readiness check only, as installing again on every pass would restart the daemons it just
    started (and hide one that died). A retry clears installed_at (services.retry_install)."""
    if all(n.installed_at is not None for n in nodes):
        return StepOutcome()
    outcome = provider.install_software(cluster, nodes)
    if outcome.ok:
        now = timezone.now()
        update_nodes(
            cluster.pk, [(n, {"installed_at": now, "step": NodeStep.CHECKING_READINESS}) for n in nodes]
        )
    return outcome


def install(cluster: Cluster, nodes: list[Node], provider: Provider) -> Next:
    _mark_installing(cluster, nodes)
    outcome = _install_once(cluster, nodes, provider)
    if outcome.ok:
        outcome = provider.check_ready(cluster, nodes)
    if outcome.failed:
        mark_degraded(cluster, outcome.failed)
        return Next.DONE
    if outcome.pending:
        if timezone.now() - cluster.status_changed_at > INSTALL_TIMEOUT:
            mark_degraded(cluster, dict.fromkeys(outcome.pending, "not ready within 30 minutes"))
            return Next.DONE
        return Next.WAIT
    mark_ready(cluster)
    return Next.DONE


def _mark_installing(cluster: Cluster, nodes: list[Node]) -> None:
    update_nodes(
        cluster.pk,
        [(n, {"state": Node.State.INSTALLING, "step": NodeStep.installing(cluster.software)})
         for n in nodes if n.state == Node.State.JOINED],
    )


GROWING = (Node.State.PENDING, Node.State.BOOTING, Node.State.UP, Node.State.JOINED, Node.State.INSTALLING)


def grow(cluster: Cluster, nodes: list[Node], provider: Provider) -> Next:
    """A ready cluster with workers being added: bring them up, rejoin everyone, install on them."""
    workers = [n for n in nodes if n.state in GROWING]
    if not workers:
        return Next.DONE
    now = timezone.now()
    deadline = dt.timedelta(minutes=cluster.machine_type.boot_deadline_minutes)
    for node in workers:
        if node.state in (Node.State.BOOTING, Node.State.UP) and node.boot_requested_at is not None and now - node.boot_requested_at > deadline:
            _release_worker(
                cluster, node, provider, f"not up and joined within {_minutes(cluster.machine_type.boot_deadline_minutes)}"
            )
            return Next.AGAIN
    failed = _boot_and_poll(cluster, workers, provider)
    if failed:
        node, detail = failed
        _release_worker(cluster, node, provider, detail)
        return Next.AGAIN
    if any(n.state == Node.State.BOOTING for n in workers):
        return Next.WAIT
    arriving = [n for n in workers if n.state == Node.State.UP]
    if arriving:
        if not provider.join_network(cluster, nodes).ok:
            return Next.WAIT
        mark_workers_joined(cluster, arriving)
        return Next.AGAIN
    installing = [n for n in workers if n.state in (Node.State.JOINED, Node.State.INSTALLING)]
    _mark_installing(cluster, installing)
    outcome = _install_once(cluster, installing, provider)
    if outcome.ok:
        # Only the arriving workers must be idle: the others may be running jobs.
        outcome = provider.check_ready(cluster, installing)
    if outcome.failed:
        mark_degraded(cluster, outcome.failed, from_status=Status.READY)
        return Next.DONE
    if outcome.pending:
        return Next.WAIT
    mark_workers_ready(cluster, installing)
    return Next.DONE


def ready(cluster: Cluster, nodes: list[Node], provider: Provider) -> Next:
    """A ready cluster: workers being added, or a node being replaced (never both at once:
    services refuse the one while the other runs)."""
    in_service = [n for n in nodes if n.replacing_id is None]
    if any(n.replacing_id is not None for n in nodes):
        return replace(cluster, nodes, provider)
    return grow(cluster, in_service, provider)


def replace(cluster: Cluster, nodes: list[Node], provider: Provider) -> Next:
    """Swap a new machine in for a node: boot it, join it to the mesh and the software under
    the node's name and address (in the old machine's place), check it, and only then stop the
    old machine. Until then the old machine is the node for every other step."""
    new = next(n for n in nodes if n.replacing_id is not None)
    old = next((n for n in nodes if n.pk == new.replacing_id), None)
    in_service = [n for n in nodes if n.replacing_id is None]
    if old is None:
        # The old machine is gone already (a pass died between its release and the swap).
        finish_replacement(cluster, new)
        return Next.DONE
    with_new = [new if n.pk == old.pk else n for n in in_service]
    now = timezone.now()
    boot_deadline = dt.timedelta(minutes=cluster.machine_type.boot_deadline_minutes)
    if new.state == Node.State.READY:
        return _take_over(cluster, old, new, provider)
    if new.state == Node.State.PENDING and cluster.status == Status.READY:
        # First pass of the swap: the old node takes no new work from now on (Slurm DRAIN), and
        # keeps what it runs until the new machine takes its name. (A degraded cluster's
        # software is not serving: there is nothing to drain.)
        record_drain(cluster, old, provider.drain(cluster, in_service, old))
    if new.state in (Node.State.PENDING, Node.State.BOOTING, Node.State.UP):
        if new.boot_requested_at is not None and now - new.boot_requested_at > boot_deadline:
            return _fail_replacement(
                cluster, new, in_service, provider,
                f"not up and joined within {_minutes(cluster.machine_type.boot_deadline_minutes)}",
            )
        failed = _boot_and_poll(cluster, [new], provider)
        if failed:
            return _fail_replacement(cluster, new, in_service, provider, failed[1])
        if new.state == Node.State.BOOTING:
            return Next.WAIT
        outcome = provider.join_network(cluster, with_new)
        if not outcome.ok:
            waiting = outcome.failed.get(new.name) or "waiting for peers"
            if new.detail != waiting[:255]:
                update_nodes(cluster.pk, [(new, {"detail": waiting[:255], "step": NodeStep.WAITING_FOR_PEERS})])
            return Next.WAIT
        mark_replacement_joined(cluster, new)
        return Next.AGAIN
    if cluster.software == Software.NONE:
        mark_replacement_ready(cluster, new)
        return Next.AGAIN
    _mark_installing(cluster, [new])
    outcome = _install_once(cluster, [new], provider)
    if outcome.ok:
        outcome = provider.check_ready(cluster, [new])
    if outcome.failed:
        return _fail_replacement(cluster, new, in_service, provider, outcome.failed.get(new.name, "install failed"))
    if outcome.pending:
        if new.joined_at is not None and now - new.joined_at > INSTALL_TIMEOUT:
            return _fail_replacement(cluster, new, in_service, provider, "not ready within 30 minutes")
        return Next.WAIT
    mark_replacement_ready(cluster, new)
    return Next.AGAIN


def _take_over(cluster: Cluster, old: Node, new: Node, provider: Provider) -> Next:
    # Ready and billed: the old machine stops now and its billing ends with it.
    _stop_machines(cluster, [old], provider)
    if finish_replacement(cluster, new):
        # The pairs through the old machine no longer say what the network carries.
        network_test_after_replace(cluster, new.name)
    return Next.DONE


def _fail_replacement(cluster: Cluster, new: Node, in_service: list[Node], provider: Provider, detail: str) -> Next:
    joined = new.state not in (Node.State.PENDING, Node.State.BOOTING)
    _stop_machines(cluster, [new], provider)
    fail_replacement(cluster, new, detail)
    if joined:
        # The peers may have taken the new machine's key and address for the node: give them
        # the old machine's back (best effort: the old one may be why it was being replaced).
        try:
            provider.join_network(cluster, in_service)
        except Exception:  # the cluster is as it was before the swap either way
            log.exception("rejoining cluster %s after a failed replacement failed", cluster.pk)
    old = next((n for n in in_service if n.pk == new.replacing_id), None)
    if old is not None and cluster.status == Status.READY:
        try:
            # It was drained when the swap started: the old machine is the node again.
            provider.drain(cluster, in_service, old, resume=True)
        except Exception:  # best effort, like the rejoin
            log.exception("resuming %s of cluster %s after a failed replacement failed", old.name, cluster.pk)
    return Next.DONE


def _release_worker(cluster: Cluster, node: Node, provider: Provider, detail: str) -> None:
    _stop_machines(cluster, [node], provider)
    release_worker(cluster, node, detail)


def degraded(cluster: Cluster, nodes: list[Node], provider: Provider) -> Next:
    """A degraded cluster waits on its customer, unless a node is being swapped for a new
    machine (then the swap goes on as on a ready cluster)."""
    if any(n.replacing_id is not None for n in nodes):
        return replace(cluster, nodes, provider)
    return Next.DONE


def terminate(cluster: Cluster, nodes: list[Node], provider: Provider) -> Next:
    _stop_machines(cluster, nodes, provider)
    finish_termination(cluster)
    return Next.DONE


STEPS = {
    Status.PROVISIONING: provision,
    Status.INSTALLING: install,
    Status.READY: ready,
    Status.DEGRADED: degraded,
    Status.TERMINATING: terminate,
}


def needs_driving() -> list[int]:
    """Clusters the sweep should push: those in a moving state whose lease is free (the sweep
    then leaves out those whose pass is already queued, services.claim_for_sweep)."""
    now = timezone.now()
    moving = Q(status__in=[Status.PROVISIONING, Status.INSTALLING, Status.TERMINATING])
    growing = Q(status=Status.READY, nodes__state__in=GROWING, nodes__released_at__isnull=True)
    # A machine being swapped in, up to the old machine's stop (it is ready by then).
    growing |= Q(status__in=[Status.READY, Status.DEGRADED], nodes__replacing__isnull=False,
                 nodes__released_at__isnull=True)
    return list(
        Cluster.objects.filter(moving | growing)
        .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now))
        .order_by()
        .values_list("pk", flat=True)
        .distinct()
    )


__all__ = ["advance", "needs_driving"]
