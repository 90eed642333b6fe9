"""Network tests: queued after ready or on request, claimed, recorded round by round and
finished with a verdict. Measured outside the cluster's lease (clusters.network_test.run): a test
never delays ready, a grow or a terminate, and a terminate stops it between two rounds."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from audit.recording import Action
from clusters import notices, rules
from clusters.errors import Conflict
from clusters.models import Cluster, NetworkTest, NetworkTestPair, Node, Status
from clusters.network_test.node import ALL_PAIRS_MAX_NODES
from clusters.services.common import SYSTEM, after_commit_changed, record_event
from clusters.services.replace import replacement_in_progress

ACTIVE_NETWORK_TEST = (NetworkTest.Status.QUEUED, NetworkTest.Status.RUNNING)


def network_test_after_ready(cluster: Cluster) -> None:
    # Simulated machines have no network to measure; a test of them could only fail.
    if settings.NETWORK_TEST_AFTER_READY and cluster.provider != "simulated":
        _queue_network_test(cluster, NetworkTest.Trigger.AFTER_READY, SYSTEM)


def network_test_after_replace(cluster: Cluster, node_name: str) -> NetworkTest | None:
    """A node took its new machine: what the network carries has changed. A test still
    running measured the old machine (its swap cut it short): it ends saying so, and the
    network is measured again now."""
    if not settings.NETWORK_TEST_AFTER_READY or cluster.provider == "simulated":
        return None
    with transaction.atomic():
        now = timezone.now()
        for active in cluster.network_tests.filter(status__in=ACTIVE_NETWORK_TEST):
            NetworkTest.objects.filter(pk=active.pk, status__in=ACTIVE_NETWORK_TEST).update(
                status=NetworkTest.Status.FAILED if not active.pairs.exists() else NetworkTest.Status.PARTIAL,
                finished_at=now,
                detail=f"Interrupted: {node_name} was replaced while the test ran. The network is measured again "
                       "on the new machine.",
            )
        test = _queue_network_test(cluster, NetworkTest.Trigger.AFTER_REPLACE, SYSTEM)
        record_event(cluster, "network_test_requested",
                     f"Network test {test.pk} queued: {node_name} runs on a new machine.")
        return test


def _measured_node_names(cluster_id: int) -> list[str]:
    # A machine being swapped in shares its name with the one it replaces until it took over.
    live = Node.objects.filter(cluster_id=cluster_id, released_at__isnull=True, replacing__isnull=True)
    return [n.name for n in live.order_by("index")]


def _queue_network_test(cluster: Cluster, trigger: str, actor: str) -> NetworkTest:
    names = _measured_node_names(cluster.pk)
    test = NetworkTest.objects.create(
        cluster=cluster, trigger=trigger, requested_by=actor, expected_gbps=rules.network_test_floor_gbps(),
        node_names=names, queued_at=timezone.now(),
    )
    _after_commit_network_changed(cluster.pk, queue=test.pk)
    return test


def _after_commit_network_changed(cluster_id: int, *, queue: int | None = None) -> None:
    transaction.on_commit(lambda: notices.network_changed(cluster_id))
    if queue is not None:
        transaction.on_commit(lambda: notices.network_test_wanted.send(sender=None, test_id=queue))


def start_network_test(cluster: Cluster, *, actor: str = SYSTEM) -> NetworkTest:
    """Measure the cluster's private network again, on request (only one test at a time)."""
    with transaction.atomic():
        # The cluster row serialises two requests: both would otherwise see no test running.
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        if cluster.status != Status.READY:
            raise Conflict(
                "not_ready", f"The network of a ready cluster can be tested; {cluster.name} is {cluster.status}."
            )
        # Mid-swap the mesh holds two machines under one name: measure once the new one took over.
        if (swapping := replacement_in_progress(cluster)) is not None:
            raise swapping
        fail_stale_network_tests(cluster_id=cluster.pk)
        active = cluster.network_tests.filter(status__in=ACTIVE_NETWORK_TEST).first()
        if active is not None:
            raise Conflict(
                "network_test_running",
                f"Network test {active.pk} of {cluster.name} is still {active.status}; wait for its results.",
                details={"network_test_id": active.pk},
            )
        test = _queue_network_test(cluster, NetworkTest.Trigger.ON_DEMAND, actor)
        record_event(cluster, "network_test_requested", f"Network test {test.pk} requested.", actor=actor,
                     audit=Action("cluster.network_test", after={"network_test": test.pk}))
        return test


def claim_network_test(test_id: int) -> NetworkTest | None:
    """Compare-and-set queued -> running: one worker runs a test, a second delivery does nothing."""
    now = timezone.now()
    if not NetworkTest.objects.filter(pk=test_id, status=NetworkTest.Status.QUEUED).update(
        status=NetworkTest.Status.RUNNING, started_at=now, alive_at=now
    ):
        return None
    test = NetworkTest.objects.select_related("cluster", "cluster__machine_type").get(pk=test_id)
    names = _measured_node_names(test.cluster_id)
    NetworkTest.objects.filter(pk=test_id).update(node_names=names)
    test.node_names = names
    _after_commit_network_changed(test.cluster_id)
    return test


def set_network_test_method(test: NetworkTest, method: str) -> None:
    NetworkTest.objects.filter(pk=test.pk).update(method=method)
    test.method = method
    _after_commit_network_changed(test.cluster_id)


def record_network_pairs(test: NetworkTest, measurements: Iterable[Any]) -> list[NetworkTestPair]:
    """One round's pairs (clusters.nodeops PairMeasurement), each marked slow against the
    test's floor. Only while the test runs: the sweep may have failed it meanwhile."""
    index = {name: int(name.removeprefix("node-")) for name in test.node_names}
    rows = [
        NetworkTestPair(
            test=test, phase=m.phase, source_index=index[m.source], target_index=index[m.target], gbps=m.gbps,
            latency_ms=m.latency_ms, slow=m.gbps is not None and m.gbps < test.expected_gbps, error=m.error[:255],
        )
        for m in measurements
    ]
    with transaction.atomic():
        if not NetworkTest.objects.select_for_update().filter(pk=test.pk, status=NetworkTest.Status.RUNNING).exists():
            return []
        created = NetworkTestPair.objects.bulk_create(rows, ignore_conflicts=True)
        _after_commit_network_changed(test.cluster_id)
    return created


@dataclass(frozen=True)
class Verdict:
    status: NetworkTest.Status
    detail: str


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _more(total: int, shown: int, separator: str) -> str:
    """A list cut short says so, and where the rest are: 16 slow pairs are not 8."""
    return f"{separator} and {total - shown} more (every pair is in the results)" if total > shown else ""


def expected_measurements(node_count: int, method: str = NetworkTest.Method.IPERF3) -> int:
    """The ring, then every ordered pair up to ALL_PAIRS_MAX_NODES nodes; none for NCCL."""
    if method == NetworkTest.Method.NCCL:
        return 0
    return node_count + (node_count * (node_count - 1) if node_count <= ALL_PAIRS_MAX_NODES else 0)


def network_test_verdict(
    pairs: Sequence[NetworkTestPair], *, expected_gbps: float, node_count: int, error: str = "",
    notes: Iterable[str] = (), nccl_rows: Sequence[dict[str, Any]] = (), expected: int | None = None,
) -> Verdict:
    """A test's outcome from what it measured, nothing else read: failed when nothing could be
    measured, partly measured when some pairs have figures and others none (or it stopped),
    slow when a pair (or NCCL's bus bandwidth) is under the floor, passed otherwise; and the
    sentence that says so, with how many of the `expected` measurements were taken. `pairs`
    carry `slow` as recorded against the floor (record_network_pairs)."""
    expected = expected_measurements(node_count) if expected is None else expected
    broken = [p for p in pairs if p.error]
    taken = [p for p in pairs if not p.error and p.gbps is not None]
    slow = [p for p in pairs if p.slow]
    peak_busbw_gbps = max((row["busbw_gbs"] * 8 for row in nccl_rows), default=None)
    nccl_slow = peak_busbw_gbps is not None and peak_busbw_gbps < expected_gbps
    lines = [*notes]
    if error:
        lines.append(error)
    if broken:
        lines.append(f"{_count(len(broken), 'pair')} could not be measured: " + "; ".join(
            f"node-{p.source_index} → node-{p.target_index}: {p.error}" for p in broken[:4])
            + _more(len(broken), 4, ";"))
    if slow:
        lines.append(f"{_count(len(slow), 'slow pair')}, under {expected_gbps:.3g} Gbit/s: " + ", ".join(
            f"node-{p.source_index} → node-{p.target_index} {p.gbps:.2f}"
            + (" (ring)" if p.phase == NetworkTestPair.Phase.RING else "") for p in slow[:8])
            + _more(len(slow), 8, ",") + ".")
    if nccl_slow:
        lines.append(f"all_reduce_perf's best bus bandwidth is {peak_busbw_gbps:.2f} Gbit/s, "
                     f"under {expected_gbps:.3g} Gbit/s.")
    if (error or broken) and taken:
        status = NetworkTest.Status.PARTIAL
    elif error or broken:
        status = NetworkTest.Status.FAILED
    elif slow or nccl_slow:
        status = NetworkTest.Status.SLOW
    else:
        status = NetworkTest.Status.PASSED
    measured = [p.gbps for p in taken if p.gbps is not None and p.phase == NetworkTestPair.Phase.PAIRS] or [
        p.gbps for p in taken if p.gbps is not None]
    if status != NetworkTest.Status.FAILED and measured:
        of = f" of {expected}" if expected and (len(taken) < expected) else ""
        lines.insert(0, f"{len(taken)}{of} measurement{'' if len(taken) == 1 and not of else 's'} taken, "
                        f"{min(measured):.2f}–{max(measured):.2f} Gbit/s.")
    elif status != NetworkTest.Status.FAILED and peak_busbw_gbps is not None:
        lines.insert(0, f"all_reduce_perf over {node_count} nodes: best bus bandwidth "
                        f"{peak_busbw_gbps:.2f} Gbit/s.")
    return Verdict(status, " ".join(lines))


def finish_network_test(test: NetworkTest, *, error: str = "", notes: Iterable[str] = (),
                        nccl_rows: list[dict[str, Any]] | None = None) -> bool:
    """Record the test's verdict (network_test_verdict) while it still runs."""
    with transaction.atomic():
        nccl_rows = nccl_rows or []
        verdict = network_test_verdict(
            list(test.pairs.all()), expected_gbps=test.expected_gbps, node_count=len(test.node_names),
            error=error, notes=notes, nccl_rows=nccl_rows,
            expected=expected_measurements(len(test.node_names), test.method),
        )
        status, detail = verdict.status, verdict.detail
        if not NetworkTest.objects.filter(pk=test.pk, status=NetworkTest.Status.RUNNING).update(
            status=status, finished_at=timezone.now(), detail=detail, nccl_rows=nccl_rows
        ):
            return False
        test.status, test.detail = status, detail
        label = {NetworkTest.Status.PASSED: "passed", NetworkTest.Status.SLOW: "found slow pairs",
                 NetworkTest.Status.PARTIAL: "measured part of the network",
                 NetworkTest.Status.FAILED: "could not run"}[status]
        record_event(test.cluster, "network_test_finished", f"Network test {test.pk} {label}. {detail}".strip(),
                     data={"network_test": {"id": test.pk, "status": status, "method": test.method}})
        after_commit_changed(test.cluster_id)
        _after_commit_network_changed(test.cluster_id)
        return True


def mark_network_test_unqueued(test_id: int) -> None:
    """Its task could not be handed to the broker: the next sweep queues it again."""
    NetworkTest.objects.filter(pk=test_id, status=NetworkTest.Status.QUEUED).update(queued_at=None)


def claim_lost_network_tests() -> list[int]:
    """Queued tests whose task never reached the broker, or reached it CLUSTER_QUEUED_GRACE_SECONDS
    ago without starting (lost with a dead worker, or by the broker), marked queued now."""
    now = timezone.now()
    lost = Q(queued_at__isnull=True) | Q(queued_at__lt=now - dt.timedelta(seconds=settings.CLUSTER_QUEUED_GRACE_SECONDS))
    with transaction.atomic():
        ids = list(
            NetworkTest.objects.select_for_update(skip_locked=True).filter(lost, status=NetworkTest.Status.QUEUED)
            .order_by("pk").values_list("pk", flat=True)
        )
        NetworkTest.objects.filter(pk__in=ids).update(queued_at=now)
    return ids


def renew_network_test(test_id: int) -> bool:
    """The runner's heartbeat; False once the test is no longer running (finished, or failed
    by the sweep)."""
    return bool(NetworkTest.objects.filter(pk=test_id, status=NetworkTest.Status.RUNNING).update(alive_at=timezone.now()))


def fail_stale_network_tests(*, cluster_id: int | None = None) -> int:
    """A running test whose heartbeat stopped NETWORK_TEST_STALE_SECONDS ago lost its worker:
    fail it, so a new one can start. (The next test's `serve` reuses an iperf3 server it left
    running.) A test that runs long but whose runner is alive is left alone."""
    cutoff = timezone.now() - dt.timedelta(seconds=settings.NETWORK_TEST_STALE_SECONDS)
    stale = NetworkTest.objects.alias(last_sign=Coalesce("alive_at", "started_at")).filter(
        status=NetworkTest.Status.RUNNING, last_sign__lt=cutoff
    )
    if cluster_id is not None:
        stale = stale.filter(cluster_id=cluster_id)
    failed = 0
    for test in stale.select_related("cluster"):
        if NetworkTest.objects.filter(pk=test.pk, status=NetworkTest.Status.RUNNING).update(
            status=NetworkTest.Status.FAILED, finished_at=timezone.now(),
            detail="The control plane worker running this test stopped before it finished; run it again.",
        ):
            failed += 1
            _after_commit_network_changed(test.cluster_id)
    return failed


def fail_network_test_of_ended_cluster(test: NetworkTest) -> bool:
    """A queued test whose cluster stopped being ready before it ran."""
    cluster = Cluster.objects.get(pk=test.cluster_id)
    updated = NetworkTest.objects.filter(pk=test.pk, status__in=ACTIVE_NETWORK_TEST).update(
        status=NetworkTest.Status.FAILED, finished_at=timezone.now(),
        detail=f"Not run: the cluster is {cluster.status}.",
    )
    if updated:
        _after_commit_network_changed(test.cluster_id)
    return bool(updated)
