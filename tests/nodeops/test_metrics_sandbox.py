"""metrics.sh over real sshd endpoints: it starts Debian's prometheus-node-exporter on the
node's loopback, reads it, and the next round reuses it; stopping the cluster stops it."""

from __future__ import annotations

import shutil
import socket

import pytest

from clusters.nodeops import operations as ops
from clusters.nodeops.metrics import collect_metrics
from tests.nodeops.test_nodeops_cluster import bring_up, root

pytestmark = pytest.mark.skipif(shutil.which("prometheus-node-exporter") is None,
                                reason="apt-get install prometheus-node-exporter")


@pytest.fixture
def up(endpoints, runner):
    spec = endpoints.spec(software="none")
    assert [step.summary() for step in bring_up(spec, runner).values() if not step.ok] == []
    yield spec
    collect_metrics(spec, runner=runner, stop=True)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_every_node_starts_its_exporter_and_reports_cpu_memory_and_disk(up, runner):
    first = collect_metrics(up, runner=runner)
    assert set(first.readings) == {f"node-{i}" for i in range(4)}
    for name, reading in first.readings.items():
        assert reading.exporter == "up", (name, reading)
        busy, total = reading.cpu_busy_and_total or (0, 0)
        assert total > 0 and 0 <= busy <= total
        assert reading.memory_total_bytes and reading.memory_available_bytes
        assert reading.disks["/"][0] > 0 and "/shared" in reading.disks
    assert first.bytes_received < 4 * 2000  # the filtered lines only
    pids = {i: (root(up, i) / "etc/runcrate/node-exporter.pid").read_text() for i in range(4)}
    second = collect_metrics(up, runner=runner)
    assert all(r.exporter == "up" for r in second.readings.values())
    assert {i: (root(up, i) / "etc/runcrate/node-exporter.pid").read_text() for i in range(4)} == pids
    busy1, total1 = first.readings["node-0"].cpu_busy_and_total or (0, 0)
    busy2, total2 = second.readings["node-0"].cpu_busy_and_total or (0, 0)
    assert total2 >= total1 and busy2 >= busy1  # counters, for rates across rounds


def test_stopping_the_cluster_stops_the_exporters(up, runner):
    collect_metrics(up, runner=runner)
    port = int((root(up, 1) / "etc/runcrate/node-exporter.port").read_text())
    assert listening(port)
    ops.stop(up, runner=runner)
    assert not listening(port)
    assert not (root(up, 1) / "etc/runcrate/node-exporter.pid").exists()


def test_a_node_whose_exporter_died_gets_a_new_one_next_round(up, runner):
    import os
    import signal
    import time

    collect_metrics(up, runner=runner)
    pidfile = root(up, 2) / "etc/runcrate/node-exporter.pid"
    os.kill(int(pidfile.read_text()), signal.SIGTERM)
    time.sleep(0.3)
    reading = collect_metrics(up, runner=runner).readings["node-2"]
    assert reading.exporter == "up" and reading.memory_total_bytes
