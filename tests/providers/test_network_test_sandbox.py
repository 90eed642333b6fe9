"""The network test on the `local` provider's sandboxes (computers without namespaces): no
wg0, so iperf3 measures between the machines' loopback addresses, which is what this
computer really carries; and a container cluster gets a per-node nccl.env."""

from __future__ import annotations

import os
import shutil
import signal

import pytest

from clusters import connect
from clusters.models import NetworkTest, Status
from clusters.network_test import run
from clusters.network_test import tasks as network_test_tasks
from clusters.network_test.services import start_network_test
from clusters.providers.local.sandbox import find_sshd
from clusters.services.create import create_cluster
from tests.providers.conftest import SETTLED, drive, local_machine_type

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(find_sshd() is None, reason="OpenSSH sshd is not installed (apt-get install openssh-server)"),
    pytest.mark.skipif(shutil.which("iperf3") is None, reason="iperf3 is not installed (apt-get install iperf3)"),
]


def test_sandbox_machines_measure_between_their_loopback_addresses(environment, local_machines):
    machine_type = local_machine_type(3, block=91)
    cluster = create_cluster(environment=environment, name="loop", machine_type=machine_type, machine_count=3)
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.READY
    test = start_network_test(cluster, actor="alice")
    # Queued after the commit and run inline (tests run tasks eagerly).
    test.refresh_from_db()
    assert test.status in (NetworkTest.Status.PASSED, NetworkTest.Status.SLOW), test.detail
    pairs = list(test.pairs.all())
    assert len(pairs) == 3 + 6 and all(p.gbps and p.gbps > 0 and not p.error for p in pairs)
    assert all(p.latency_ms is not None for p in pairs)
    # No server is left listening once the test is over.
    assert network_test_tasks.sweep_network_tests() == {"failed": 0, "queued_again": 0}
    for node in cluster.nodes.select_related("host"):
        assert not (local_machines / node.host.name / "root" / "etc" / "runcrate" / "iperf3.pid").exists()


def test_container_machines_each_get_their_own_nccl_env_and_the_launch_lines_source_it(environment, local_machines):
    machine_type = local_machine_type(2, block=92, kind="container")
    cluster = drive(create_cluster(environment=environment, name="box", machine_type=machine_type,
                                            machine_count=2), SETTLED)
    assert cluster.status == Status.READY
    for node in cluster.nodes.select_related("host"):
        text = (local_machines / node.host.name / "root" / "etc" / "runcrate" / "nccl.env").read_text()
        assert "export NCCL_SOCKET_IFNAME=wg0" in text and "export NCCL_IB_DISABLE=1" in text
        assert not (local_machines / node.host.name / "root" / "shared" / "nccl.env").exists()
    assert "source /etc/runcrate/nccl.env && mpirun" in connect.launch_lines(cluster)["mpirun"]


def test_pairs_a_node_cannot_serve_are_said_in_plain_words_and_the_others_are_counted_and_shown(
    environment, local_machines, monkeypatch
):
    machine_type = local_machine_type(3, block=93)
    cluster = drive(create_cluster(environment=environment, name="part", machine_type=machine_type, machine_count=3),
                    SETTLED)
    assert cluster.status == Status.READY
    node_2 = cluster.nodes.select_related("host").get(index=2)
    started = run._Recorder.started

    def started_then_node_2_stops_serving(self, method):
        # Every node answered the probe; then node-2's iperf3 server goes away.
        pid = (local_machines / node_2.host.name / "root" / "etc" / "runcrate" / "iperf3.pid").read_text().strip()
        os.kill(int(pid), signal.SIGTERM)
        started(self, method)

    monkeypatch.setattr(run._Recorder, "started", started_then_node_2_stops_serving)
    test = start_network_test(cluster, actor="alice")
    test.refresh_from_db()
    pairs = list(test.pairs.all())
    broken = [p for p in pairs if p.error]
    assert broken and all(p.target_index == 2 for p in broken), [(p.source_index, p.target_index, p.error) for p in pairs]
    # Measured pairs keep their figures; the verdict counts them instead of "Could not run".
    assert test.status == NetworkTest.Status.PARTIAL, test.detail
    taken = len(pairs) - len(broken)
    assert test.get_status_display() == "Partly measured"
    assert test.detail.startswith(f"{taken} of 9 measurements taken, "), test.detail
    # No step or section markers of the node script, on the pairs, the verdict or the events.
    story = " ".join([test.detail, *(p.error for p in pairs), *cluster.events.values_list("message", flat=True)])
    assert "::" not in story, story


def test_a_replaced_node_has_the_network_measured_again_and_an_earlier_test_is_said_interrupted(
    environment, local_machines, settings
):
    from clusters.models import Node
    from clusters.services.replace import replace_node

    settings.NETWORK_TEST_AFTER_READY = True
    machine_type = local_machine_type(3, block=94)
    cluster = drive(create_cluster(environment=environment, name="swap", machine_type=machine_type, machine_count=2),
                    SETTLED)
    assert cluster.status == Status.READY
    first = cluster.network_tests.get()
    assert first.status in (NetworkTest.Status.PASSED, NetworkTest.Status.SLOW), first.detail
    # A test the swap catches mid-way (queued, its worker not there yet) is said to be interrupted.
    caught = NetworkTest.objects.create(cluster=cluster, trigger=NetworkTest.Trigger.ON_DEMAND, expected_gbps=0.1,
                                        node_names=["node-0", "node-1"], status=NetworkTest.Status.RUNNING)
    replace_node(cluster, "node-1", actor="alice")
    deadline_passes = 0
    while cluster.nodes.filter(index=1, released_at__isnull=True).count() > 1 and deadline_passes < 60:
        cluster = drive(cluster, SETTLED, timeout=2)
        deadline_passes += 1
    new = cluster.nodes.get(index=1, released_at__isnull=True)
    assert new.state == Node.State.READY
    caught.refresh_from_db()
    assert caught.status == NetworkTest.Status.FAILED
    assert caught.detail.startswith("Interrupted: node-1 was replaced while the test ran.")
    again = cluster.network_tests.exclude(pk__in=[first.pk, caught.pk]).get()
    assert again.trigger == NetworkTest.Trigger.AFTER_REPLACE
    assert again.status in (NetworkTest.Status.PASSED, NetworkTest.Status.SLOW), again.detail
    assert len(again.pairs.all()) == 2 + 2
