"""The network test on the `local` provider's sandboxes (computers without namespaces): no
wg0, so iperf3 measures between the machines' loopback addresses, which is what this
computer really carries; and a container cluster gets a per-node nccl.env."""

from __future__ import annotations

import shutil

import pytest

from clusters import connect, tasks
from clusters.models import NetworkTest, Status
from clusters.providers.local.sandbox import find_sshd
from clusters.services.create import create_cluster
from clusters.services.network_tests import start_network_test
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
    assert tasks.sweep_network_tests() == {"failed": 0, "queued_again": 0}
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
    assert connect.launch_lines(cluster)["torchrun"].startswith("source /etc/runcrate/nccl.env && torchrun")
