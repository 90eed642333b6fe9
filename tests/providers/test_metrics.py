"""Node metrics collected for real on the `local` provider: sandbox machines (sshd on loopback
addresses) and, where this computer can run them, real nodes in namespaces with wg0."""

from __future__ import annotations

import shutil
import socket
import time

import pytest

from clusters.models import Status
from clusters.providers.local import realnodes
from clusters.providers.local.sandbox import find_sshd
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from metrics import tasks
from metrics.models import NodeSample
from tests.providers.conftest import SETTLED, drive, local_machine_type
from tests.providers.test_real_nodes import on_node, real_machine_type, real_machines  # noqa: F401

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(find_sshd() is None, reason="OpenSSH sshd is not installed (apt-get install openssh-server)"),
    pytest.mark.skipif(shutil.which("prometheus-node-exporter") is None,
                       reason="apt-get install prometheus-node-exporter"),
]


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_rounds_on_sandbox_machines_record_every_node_and_terminating_stops_the_exporters(environment, local_machines):
    machine_type = local_machine_type(2, block=93)
    cluster = create_cluster(environment=environment, name="watch", machine_type=machine_type, machine_count=2)
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.READY
    assert tasks.collect_cluster_metrics(cluster.pk) == 2
    time.sleep(1.1)
    assert tasks.collect_cluster_metrics(cluster.pk) == 2
    latest = NodeSample.objects.filter(cluster=cluster).order_by("-at")[:2]
    for sample in latest:
        assert sample.cpu_percent is not None and 0 <= sample.cpu_percent <= 100
        assert sample.memory_percent and sample.root_percent is not None and sample.shared_percent is not None
    ports = [int((local_machines / n.host.name / "root/etc/runcrate/node-exporter.port").read_text())
             for n in cluster.nodes.select_related("host")]
    assert all(listening(port) for port in ports)
    terminate_cluster(cluster, actor="alice")
    cluster = drive(cluster, {Status.TERMINATED})
    assert not any(listening(port) for port in ports)
    assert tasks.collect_cluster_metrics(cluster.pk) is None


CAN, WHY = realnodes.capability()


@pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}")
def test_a_busy_loop_on_a_real_node_moves_its_cpu_and_wg0_traffic_shows(environment, owner, real_machines):
    machine_type = real_machine_type(2)
    cluster = create_cluster(environment=environment, name="busy", machine_type=machine_type,
                                      machine_count=2, software="none", created_by=owner)
    cluster = drive(cluster, SETTLED, timeout=150)
    assert cluster.status == Status.READY
    assert tasks.collect_cluster_metrics(cluster.pk) == 2
    node1 = cluster.nodes.get(index=1)
    on_node(real_machines, node1, "nohup timeout 8 sh -c 'while :; do :; done' >/dev/null 2>&1 & "
                                  "ping -c 20 -i 0.05 -s 1200 10.77.0.1 >/dev/null")
    time.sleep(2)
    assert tasks.collect_cluster_metrics(cluster.pk) == 2
    sample = NodeSample.objects.filter(node=node1).latest("at")
    assert sample.cpu_percent is not None and sample.cpu_percent >= 25  # one of this computer's CPUs, at least in part
    assert sample.net_tx_bps and sample.net_tx_bps > 0 and sample.net_rx_bps and sample.net_rx_bps > 0
    # A container machine's memory is its own cgroup's, not this computer's.
    from clusters.providers.local.provider import node_limits
    assert sample.memory_total_bytes == node_limits(machine_type).cgroup_memory_mb << 20
    # Its own disk's size, less what ext4 keeps for itself.
    disk = node_limits(machine_type).disk_mb << 20
    assert sample.root_total_bytes is not None and 0.95 * disk <= sample.root_total_bytes <= disk
