"""The network test's verdict is a pure function of what was measured: no database, no test row."""

from __future__ import annotations

from clusters.models import NetworkTest, NetworkTestPair
from clusters.network_test.services import network_test_verdict

PAIRS, RING = NetworkTestPair.Phase.PAIRS, NetworkTestPair.Phase.RING


def pair(source: int, target: int, gbps: float | None, *, phase: str = PAIRS, floor: float = 1.0,
         error: str = "") -> NetworkTestPair:
    # Unsaved rows, marked slow as record_network_pairs marks them.
    return NetworkTestPair(phase=phase, source_index=source, target_index=target, gbps=gbps, error=error,
                           slow=gbps is not None and gbps < floor)


def test_every_pair_over_the_floor_passes_and_says_the_range():
    verdict = network_test_verdict([pair(0, 1, 1.5), pair(1, 0, 2.25), pair(0, 1, 0.4, phase=RING, floor=0.1)],
                                   expected_gbps=1.0, node_count=2)
    assert verdict.status == NetworkTest.Status.PASSED
    # The range is of the pairwise phase; the ring's lower figure does not narrow it.
    assert verdict.detail == "3 of 4 measurements taken, 1.50–2.25 Gbit/s."


def test_a_pair_under_the_floor_makes_it_slow_and_names_the_pair():
    verdict = network_test_verdict([pair(0, 1, 1.5), pair(1, 2, 0.5), pair(2, 0, 0.25, phase=RING)],
                                   expected_gbps=1.0, node_count=3)
    assert verdict.status == NetworkTest.Status.SLOW
    assert verdict.detail == (
        "3 of 9 measurements taken, 0.50–1.50 Gbit/s. 2 slow pairs, under 1 Gbit/s: "
        "node-1 → node-2 0.50, node-2 → node-0 0.25 (ring)."
    )


def test_pairs_that_could_not_be_measured_leave_it_partly_measured_with_the_others_counted():
    measured = [pair(s, t, 1.5) for s in range(4) for t in range(4) if s != t and t != 3]
    broken = [pair(0, 3, None, error="unable to connect to node-3"), pair(1, 3, None, error="unable to connect")]
    verdict = network_test_verdict([*measured, *broken], expected_gbps=1.0, node_count=4, expected=11)
    assert verdict.status == NetworkTest.Status.PARTIAL
    assert verdict.detail == (
        "9 of 11 measurements taken, 1.50–1.50 Gbit/s. 2 pairs could not be measured: "
        "node-0 → node-3: unable to connect to node-3; node-1 → node-3: unable to connect"
    )


def test_nothing_measured_is_a_test_that_could_not_run():
    verdict = network_test_verdict([pair(1, 0, None, error="iperf3: connection refused")],
                                   expected_gbps=1.0, node_count=2)
    assert verdict.status == NetworkTest.Status.FAILED
    assert verdict.detail == "1 pair could not be measured: node-1 → node-0: iperf3: connection refused"


def test_an_error_fails_it_after_the_notes():
    verdict = network_test_verdict([], expected_gbps=1.0, node_count=2, error="The cluster is no longer ready.",
                                   notes=["Measured with iperf3."])
    assert verdict == type(verdict)(NetworkTest.Status.FAILED, "Measured with iperf3. The cluster is no longer ready.")


def test_nccl_alone_passes_on_its_best_bus_bandwidth_and_is_slow_under_the_floor():
    rows = [{"busbw_gbs": 0.1}, {"busbw_gbs": 0.25}]  # GB/s: 2 Gbit/s at best
    passed = network_test_verdict([], expected_gbps=1.0, node_count=4, nccl_rows=rows)
    assert passed.status == NetworkTest.Status.PASSED
    assert passed.detail == "all_reduce_perf over 4 nodes: best bus bandwidth 2.00 Gbit/s."
    slow = network_test_verdict([], expected_gbps=3.0, node_count=4, nccl_rows=rows)
    assert slow.status == NetworkTest.Status.SLOW
    assert slow.detail == ("all_reduce_perf over 4 nodes: best bus bandwidth 2.00 Gbit/s. "
                           "all_reduce_perf's best bus bandwidth is 2.00 Gbit/s, under 3 Gbit/s.")


def test_only_ring_figures_give_the_range():
    verdict = network_test_verdict([pair(0, 1, 1.25, phase=RING), pair(1, 0, 1.75, phase=RING)],
                                   expected_gbps=1.0, node_count=2)
    assert verdict.detail == "2 of 4 measurements taken, 1.25–1.75 Gbit/s."


def test_a_list_cut_short_says_how_many_more_there_are():
    slow = [pair(s, t, 0.1) for s in range(4) for t in range(4) if s != t]  # 12 pairs, all slow
    verdict = network_test_verdict(slow, expected_gbps=1.0, node_count=4, expected=12)
    assert verdict.detail.startswith("12 measurements taken, 0.10–0.10 Gbit/s. 12 slow pairs, under 1 Gbit/s: "
                                     "node-0 → node-1 0.10, "), verdict.detail
    assert verdict.detail.endswith("node-2 → node-1 0.10, and 4 more (every pair is in the results)."), verdict.detail
    broken = [pair(s, 3, None, error="refused") for s in range(3)] + [pair(3, t, None, error="refused") for t in range(3)]
    verdict = network_test_verdict(broken, expected_gbps=1.0, node_count=4, expected=12)
    assert verdict.detail.endswith("node-3 → node-0: refused; and 2 more (every pair is in the results)"), verdict.detail
