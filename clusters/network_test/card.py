"""A network test read for people: the page's Network card, the API's summary and the CLI's
node x node matrix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Prefetch, QuerySet

from clusters import rules
from clusters.models import Cluster, NetworkTest, NetworkTestPair, Node, Status
from clusters.network_test.services import expected_measurements
from offers.models import PRIVATE_NETWORK_SPEED

HISTORY = 5


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


def summary(test: NetworkTest) -> dict[str, Any]:
    pairs = list(test.pairs.all())
    figures = [p.gbps for p in pairs if p.gbps is not None]
    latencies = [p.latency_ms for p in pairs if p.latency_ms is not None]
    peak_busbw = max((row["busbw_gbs"] for row in test.nccl_rows), default=None)
    return {
        "pairs_measured": len(pairs),
        "pairs_expected": expected_measurements(len(test.node_names), test.method),
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
