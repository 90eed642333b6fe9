"""Reading what iperf3, ping and nccl-tests' all_reduce_perf print, and the test's rounds.

iperf3 and ping run here for real (on loopback), so the parsers read their real output.
all_reduce_perf needs GPUs: its table is in the layout nccl-tests prints (its README and
docs/PERFORMANCE.md), with figures of our own."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from clusters.network_test.node import pair_rounds, ring_round
from clusters.network_test.parsers import (
    all_reduce_average_busbw,
    all_reduce_perf_rows,
    iperf3_result,
    ping_average_ms,
)
from clusters.providers.local.sandbox import free_port

IPERF3 = shutil.which("iperf3")
needs_iperf3 = pytest.mark.skipif(IPERF3 is None, reason="iperf3 is not installed (apt-get install iperf3)")


@needs_iperf3
def test_a_real_iperf3_run_reads_as_the_gigabits_that_arrived():
    port = free_port("127.0.0.1")
    server = subprocess.Popen([IPERF3, "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],  # type: ignore[list-item]
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.3)
        client = subprocess.run([IPERF3, "-c", "127.0.0.1", "-p", str(port), "-t", "1", "--json"],  # type: ignore[list-item]
                                capture_output=True, text=True, timeout=30)
    finally:
        server.wait(timeout=30)
    result = iperf3_result(client.stdout)
    assert result.error == "" and result.gbps is not None and result.gbps > 0
    received = json.loads(client.stdout)["end"]["sum_received"]["bits_per_second"]
    assert result.gbps == round(received / 1e9, 3)


@needs_iperf3
def test_an_iperf3_run_with_no_server_reads_as_its_error_not_a_figure():
    port = free_port("127.0.0.1")
    client = subprocess.run([IPERF3, "-c", "127.0.0.1", "-p", str(port), "-t", "1", "--json"],  # type: ignore[list-item]
                            capture_output=True, text=True, timeout=30)
    # iperf3 3.12 exits 0 here with --json: only the JSON's "error" says the run failed.
    result = iperf3_result(client.stdout)
    assert result.gbps is None and result.error.startswith("iperf3: unable to connect")


def test_no_iperf3_output_is_an_error():
    assert iperf3_result("").error == "iperf3 printed no result: no output"
    assert iperf3_result("bash: iperf3: command not found\n").error.endswith("command not found")
    assert iperf3_result("{not json").error.startswith("unreadable iperf3 output")


@pytest.mark.skipif(shutil.which("ping") is None, reason="no ping")
def test_a_real_ping_reads_as_its_average_round_trip():
    done = subprocess.run(["ping", "-c", "3", "-i", "0.2", "-q", "127.0.0.1"], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"ping cannot run here: {done.stderr.strip()}")
    average = ping_average_ms(done.stdout)
    assert average is not None and 0 <= average < 50


def test_ping_of_bsd_and_of_nothing_answering():
    bsd = "3 packets transmitted, 3 packets received, 0.0% packet loss\nround-trip min/avg/max/stddev = 0.051/0.078/0.101/0.020 ms\n"
    assert ping_average_ms(bsd) == 0.078
    lost = "3 packets transmitted, 0 received, 100% packet loss, time 2030ms\n"
    assert ping_average_ms(lost) is None


ALL_REDUCE_PERF = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  41021 on     node-0 device  0 [0x1b] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  37710 on     node-1 device  0 [0x1b] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    212.4    0.00    0.00      0    209.8    0.00    0.00      0
        1024           256     float     sum      -1    230.1    0.00    0.00      0    228.6    0.00    0.00      0
     1048576        262144     float     sum      -1   9921.0    0.11    0.11      0   9874.3    0.11    0.11      0
   134217728      33554432     float     sum      -1   761204    0.18    0.18      0   758811    0.18    0.18      0
  1073741824     268435456     float     sum      -1  5710388    0.19    0.19      0  5698120    0.19    0.19      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.0960
#
"""


def test_all_reduce_perf_reads_as_bus_bandwidth_by_message_size():
    rows = all_reduce_perf_rows(ALL_REDUCE_PERF)
    assert [r.size_bytes for r in rows] == [8, 1024, 1048576, 134217728, 1073741824]
    assert rows[-1].busbw_gbs == 0.19 and rows[-1].algbw_gbs == 0.19 and rows[-1].time_us == 5710388
    assert all(r.wrong == 0 for r in rows)
    assert all_reduce_average_busbw(ALL_REDUCE_PERF) == 0.096


def test_an_all_reduce_perf_that_died_reads_as_no_rows():
    died = ALL_REDUCE_PERF.split("           8")[0] + "node-1: Test NCCL failure common.cu:1005 'unhandled system error'\n"
    assert all_reduce_perf_rows(died) == [] and all_reduce_average_busbw(died) is None


@pytest.mark.parametrize("count", range(2, 12))
def test_every_ordered_pair_is_measured_once_and_no_node_is_in_two_pairs_of_a_round(count):
    rounds = pair_rounds(count)
    flat = [pair for round_ in rounds for pair in round_]
    assert sorted(flat) == sorted((s, t) for s in range(count) for t in range(count) if s != t)
    for round_ in rounds:
        nodes = [node for pair in round_ for node in pair]
        assert len(nodes) == len(set(nodes))
    assert len(rounds) == 2 * (count - 1 + count % 2)
    assert ring_round(count) == [(i, (i + 1) % count) for i in range(count)]
