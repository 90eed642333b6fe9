"""The network test on real nodes: iperf3 and ping over wg0 between namespaced machines.

The figures are what wireguard-go really moved between the nodes; a node whose link is
throttled with `tc` inside its own namespace (and on the switch port that feeds it) is the
one whose pairs come out slow. Also: /shared/nccl.env names the interface that really
carries 10.77.0.x on every node, and the Connect card's launch lines source it.
"""

from __future__ import annotations

import subprocess

import pytest

from clusters import connect
from clusters.models import NetworkTest, NetworkTestPair, Status
from clusters.network_test.services import record_network_pairs, start_network_test
from clusters.providers.local import realnodes
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from tests.providers.conftest import SETTLED, drive
from tests.providers.test_real_nodes import handle, on_node, real_machine_type, real_machines, story  # noqa: F401

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
]


def throttle(real_machines, node, rate: str = "200mbit") -> None:
    """Both directions of one node's link: its eth0 (what it sends) and the switch port that
    feeds it (what it receives)."""
    node_handle = handle(real_machines, node)
    rule = ["tc", "qdisc", "replace", "dev", "{dev}", "root", "tbf", "rate", rate, "burst", "32kbit", "latency", "400ms"]
    inside = realnodes.run_in(node_handle, [part.replace("{dev}", "eth0") for part in rule])
    assert inside.returncode == 0, inside.stderr
    switch = realnodes.Underlay(real_machines).switch
    outside = subprocess.run(["ip", "netns", "exec", switch, *[p.replace("{dev}", node_handle.veth) for p in rule]],
                             capture_output=True, text=True)
    assert outside.returncode == 0, outside.stderr


def test_a_ready_cluster_measures_every_pair_over_wg0_and_a_throttled_node_comes_out_slow(
    environment, real_machines, settings
):
    settings.NETWORK_TEST_AFTER_READY = True
    machine_type = real_machine_type(3)
    cluster = create_cluster(environment=environment, name="net", machine_type=machine_type, machine_count=3)
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)
    nodes = list(cluster.nodes.select_related("host").order_by("index"))

    # Ready queued the first test by itself (tasks run inline here: it ran after the commit).
    first = cluster.network_tests.get()
    assert first.trigger == NetworkTest.Trigger.AFTER_READY and first.method == NetworkTest.Method.IPERF3
    assert first.status in (NetworkTest.Status.PASSED, NetworkTest.Status.SLOW), first.detail
    pairs = list(first.pairs.all())
    assert {(p.phase, p.source_index, p.target_index) for p in pairs} == (
        {("ring", 0, 1), ("ring", 1, 2), ("ring", 2, 0)}
        | {("pairs", s, t) for s in range(3) for t in range(3) if s != t}
    )
    assert all(p.gbps and p.gbps > 0 and not p.error for p in pairs), [(p.source_index, p.target_index, p.error) for p in pairs]
    assert all(p.latency_ms is not None and 0 < p.latency_ms < 50 for p in pairs if p.phase == "pairs")

    # The interface NCCL is told to use is the one that carries the node's private address.
    for node in nodes:
        shown = on_node(real_machines, node, "cat /shared/nccl.env").stdout
        assert "export NCCL_SOCKET_IFNAME=wg0" in shown and "export GLOO_SOCKET_IFNAME=wg0" in shown
        assert "export NCCL_IB_DISABLE=1" in shown
        sourced = on_node(real_machines, node, "source /shared/nccl.env && ip -o -4 addr show dev $NCCL_SOCKET_IFNAME")
        assert f"inet {node.private_ip}/24" in sourced.stdout, sourced.stderr
    launch = connect.launch_lines(cluster)
    assert "source /shared/nccl.env" in launch["mpirun"]

    # node-2's link is throttled each way to a tenth of the slowest pair just measured (this
    # computer's two CPUs run every node's wireguard-go: what it carries depends on its load),
    # and a pair is slow under a third of it: exactly node-2's pairs come out slow.
    slowest = min(p.gbps or 0.0 for p in pairs if p.phase == "pairs")
    settings.NETWORK_TEST_SLOW_BELOW_GBPS = slowest / 3
    throttle(real_machines, nodes[2], f"{max(int(slowest * 100), 5)}mbit")
    second = start_network_test(cluster, actor="alice")
    second.refresh_from_db()
    assert second.status == NetworkTest.Status.SLOW, second.detail
    measured = {(p.source_index, p.target_index): p for p in second.pairs.filter(phase=NetworkTestPair.Phase.PAIRS)}
    assert len(measured) == 6
    for (source, target), pair in measured.items():
        touches = 2 in (source, target)
        assert pair.slow == touches, (source, target, pair.gbps)
        if touches:
            assert pair.gbps is not None and pair.gbps < slowest / 5, (source, target, pair.gbps, slowest)
    assert "slow" in second.detail and "node-2" in second.detail
    assert cluster.events.filter(event="network_test_finished").count() == 2


def test_terminating_the_cluster_mid_test_stops_it_cleanly_after_the_round_in_flight(
    environment, real_machines, monkeypatch
):
    machine_type = real_machine_type(2)
    cluster = create_cluster(environment=environment, name="gone", machine_type=machine_type, machine_count=2)
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)
    record = record_network_pairs

    def then_terminate(test, measurements):
        recorded = record(test, measurements)
        # The customer terminates while the ring's figures arrive (tasks run inline: the
        # cluster is stopped and released before the next round is asked for).
        terminate_cluster(cluster, actor="alice")
        return recorded

    monkeypatch.setattr("clusters.network_test.run.record_network_pairs", then_terminate)
    test = start_network_test(cluster, actor="alice")
    test.refresh_from_db()
    cluster.refresh_from_db()
    assert cluster.status == Status.TERMINATED
    # The ring's figures were taken before the cluster went: the test reads as partly measured.
    assert test.status == NetworkTest.Status.PARTIAL and "no longer ready" in test.detail, test.detail
    assert {p.phase for p in test.pairs.all()} == {"ring"} and test.pairs.count() == 2
    assert all(p.gbps and p.gbps > 0 for p in test.pairs.all())

