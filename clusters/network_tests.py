"""The network test: what a cluster's private network really carries between its machines.

A Celery task (clusters.tasks.run_network_test) claims a queued test and asks the cluster's
provider to measure; the provider runs clusters.nodeops.operations.network_test on the nodes
(iperf3 + ping over wg0, or nccl-tests' all_reduce_perf on GPU machines) and every round's
pairs are recorded and pushed to the page as they finish. It holds no cluster lease: a test
never delays ready, a grow or a terminate; between two rounds it asks whether the cluster is
still ready and stops cleanly when it is not. While it runs, a heartbeat thread renews the
test's `alive_at` every NETWORK_TEST_HEARTBEAT_SECONDS; a worker that dies mid-test stops it,
and the sweep (sweep_network_tests) fails the test NETWORK_TEST_STALE_SECONDS after the last
beat, so a new test may start within about half a minute.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings
from django.db.models import Prefetch, QuerySet

from clusters import rules
from clusters.beats import Beat
from clusters.models import Cluster, NetworkTest, NetworkTestPair, Node, Status
from clusters.nodeops.operations import ALL_PAIRS_MAX_NODES, NetworkTestReport, PairMeasurement
from clusters.providers import get_provider
from clusters.services.network_tests import (
    claim_network_test,
    fail_network_test_of_ended_cluster,
    finish_network_test,
    record_network_pairs,
    renew_network_test,
    set_network_test_method,
)
from offers.models import PRIVATE_NETWORK_SPEED

log = logging.getLogger(__name__)

HISTORY = 5


class _Recorder(NetworkTestReport):
    def __init__(self, test: NetworkTest) -> None:
        self.test = test

    def started(self, method: str) -> None:
        set_network_test_method(self.test, method)

    def measured(self, pairs: list[PairMeasurement]) -> None:
        record_network_pairs(self.test, pairs)

    def keep_going(self) -> bool:
        # A node being replaced stops the test too: its pairs would measure a machine on its
        # way out (the test runs again once the new one has taken over).
        return NetworkTest.objects.filter(
            pk=self.test.pk, status=NetworkTest.Status.RUNNING, cluster__status=Status.READY
        ).exists() and not _swapping(self.test.cluster_id)


def _swapping(cluster_id: int) -> bool:
    return Node.objects.filter(cluster_id=cluster_id, replacing__isnull=False, released_at__isnull=True).exists()


class Heartbeat(Beat):
    """Renews a running test's `alive_at` while the measuring runs, so the sweep can tell a long
    test from one whose worker died."""

    def __init__(self, test_id: int, interval: float | None = None) -> None:
        super().__init__(settings.NETWORK_TEST_HEARTBEAT_SECONDS if interval is None else interval,
                         name=f"network-test-{test_id}", beat=self._renew)
        self.test_id = test_id

    def _renew(self) -> bool:
        # False once finished, or failed by the sweep: nothing left to keep alive.
        return renew_network_test(self.test_id)


def run(test_id: int) -> str | None:
    """Run a queued test to its end; the outcome, or None when it was not this worker's to run."""
    test = claim_network_test(test_id)
    if test is None:
        return None
    cluster = test.cluster
    if cluster.status != Status.READY:
        fail_network_test_of_ended_cluster(test)
        return NetworkTest.Status.FAILED
    nodes = list(cluster.nodes.select_related("host").filter(released_at__isnull=True, replacing__isnull=True)
                 .order_by("index"))
    try:
        with Heartbeat(test.pk):
            result = get_provider(cluster.provider).network_test(cluster, nodes, _Recorder(test))
    except Exception as exc:  # the test fails with the reason, the cluster is untouched
        log.exception("network test %s of cluster %s failed", test.pk, cluster.pk)
        finish_network_test(test, error=f"The control plane hit an error: {type(exc).__name__}: {exc}"[:500])
        return NetworkTest.Status.FAILED
    if result.stopped and _swapping(cluster.pk):
        result.error = "Stopped: a node is being replaced. The network is measured again once its new machine has taken over."
    finish_network_test(
        test, error=result.error, notes=result.notes, nccl_rows=[asdict(row) for row in result.nccl_rows],
    )
    test.refresh_from_db(fields=["status"])
    return test.status


# --- reading, for the page, the API and the CLI's matrix -------------------------------------


@dataclass(frozen=True)
class Cell:
    target: str
    gbps: float | None
    latency_ms: float | None
    slow: bool
    error: str
    measured: bool
    # The two nodes run on different hosts: the pair's traffic crosses the hosts' network.
    crosses_hosts: bool = False

    @property
    def css(self) -> str:
        if not self.measured:
            return "pending"
        if self.error:
            return "error"
        return "slow" if self.slow else "ok"


@dataclass(frozen=True)
class MatrixRow:
    source: str
    cells: list[Cell | None]  # None on the diagonal


def matrix(test: NetworkTest, phase: str = NetworkTestPair.Phase.PAIRS) -> list[MatrixRow]:
    """node x node: rows send, columns receive; cells not measured yet are `pending`."""
    names = list(test.node_names)
    found: dict[tuple[int, int], NetworkTestPair] = {
        (p.source_index, p.target_index): p for p in test.pairs.all() if p.phase == phase
    }
    # Where each node runs now (its host; None for this computer's machines).
    site = dict(Node.objects.filter(cluster_id=test.cluster_id, released_at__isnull=True, replacing__isnull=True)
                .values_list("index", "host__physical_host_id"))
    rows = []
    for source in names:
        s = int(source.removeprefix("node-"))
        cells: list[Cell | None] = []
        for target in names:
            t = int(target.removeprefix("node-"))
            if s == t:
                cells.append(None)
                continue
            pair = found.get((s, t))
            crosses = site.get(s) != site.get(t)
            cells.append(Cell(target, pair.gbps, pair.latency_ms, pair.slow, pair.error, True, crosses) if pair
                         else Cell(target, None, None, False, "", False, crosses))
        rows.append(MatrixRow(source, cells))
    return rows


def ring(test: NetworkTest) -> list[NetworkTestPair]:
    return sorted((p for p in test.pairs.all() if p.phase == NetworkTestPair.Phase.RING), key=lambda p: p.source_index)


def expected_pairs(test: NetworkTest) -> int:
    count = len(test.node_names)
    if test.method == NetworkTest.Method.NCCL:
        return 0
    return count + (count * (count - 1) if count <= ALL_PAIRS_MAX_NODES else 0)


def summary(test: NetworkTest) -> dict[str, Any]:
    pairs = list(test.pairs.all())
    figures = [p.gbps for p in pairs if p.gbps is not None]
    latencies = [p.latency_ms for p in pairs if p.latency_ms is not None]
    peak_busbw = max((row["busbw_gbs"] for row in test.nccl_rows), default=None)
    return {
        "pairs_measured": len(pairs),
        "pairs_expected": expected_pairs(test),
        "slow_pairs": sum(p.slow for p in pairs),
        "failed_pairs": sum(bool(p.error) for p in pairs),
        "min_gbps": min(figures) if figures else None,
        "max_gbps": max(figures) if figures else None,
        "max_latency_ms": max(latencies) if latencies else None,
        "nccl_peak_busbw_gbs": peak_busbw,
    }


def with_pairs(tests: QuerySet[NetworkTest]) -> QuerySet[NetworkTest]:
    return tests.prefetch_related(Prefetch("pairs", queryset=NetworkTestPair.objects.order_by("phase", "source_index", "target_index")))


def card(cluster: Cluster) -> dict[str, Any]:
    """What the cluster page's Network card shows: the newest test, its matrix and ring, and
    the few runs before it."""
    tests = list(with_pairs(cluster.network_tests.order_by("-created_at", "-id"))[: HISTORY + 1])
    latest = tests[0] if tests else None
    return {
        "latest": latest,
        "matrix": (rows := matrix(latest) if latest else []),
        "crosses_hosts": any(cell and cell.crosses_hosts for row in rows for cell in row.cells),
        "ring": ring(latest) if latest else [],
        "summary": summary(latest) if latest else None,
        "history": [(t, summary(t)) for t in tests[1:]],
        "can_start": cluster.status == Status.READY and not (latest and not latest.is_finished),
        "shown": bool(tests) or cluster.status == Status.READY,
        "floor_gbps": latest.expected_gbps if latest else rules.network_test_floor_gbps(),
        "promise": PRIVATE_NETWORK_SPEED,
    }
