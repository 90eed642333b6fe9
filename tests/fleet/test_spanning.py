"""A cluster that spans hosts: nodes on different lab hosts join one encrypted network, and
everything a customer does across nodes works across hosts as within one; a node whose host
dies is replaced on another host under its name and address."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator

import pytest

from clusters import connect
from clusters.models import Node, NodeHealth, Status
from clusters.providers.local import realnodes
from clusters.services.create import create_cluster
from clusters.services.replace import replace_node
from offers.models import Host, MachineType, PhysicalHost
from tests.factories import MachineTypeFactory
from tests.providers.conftest import SETTLED, drive
from tests.providers.test_real_nodes import customer_key, customer_ssh, story

from .conftest import add_host, lab_hosts, needs_lab

CAN, WHY = realnodes.capability()


@contextlib.contextmanager
def fleet_of(lab: dict[str, dict], layout: dict[str, int], settings, tmp_path) -> Iterator[MachineType]:
    """One machine type sold from lab hosts ({host: machines}, onboarded in that order: a
    cluster takes the first host's slots first); every slot released on its host afterwards."""
    from clusters.providers.fleet import runtime_for
    from clusters.providers.local import provider as local
    from offers.hostruntime import RuntimeFailed

    settings.LOCAL_MACHINES_DIR = str(tmp_path / "machines")
    settings.LOCAL_NODES = "namespaces"
    local._MODE.clear()
    machine_type = MachineTypeFactory(provider="local", gpus_per_machine=1, disk_gb=100)
    for name, machines in layout.items():
        add_host(lab[name], machine_type.pk, machines)
    try:
        yield machine_type
    finally:
        for host in PhysicalHost.objects.all():
            for slot in Host.objects.filter(physical_host=host):
                with contextlib.suppress(RuntimeFailed):
                    runtime_for(host).call("release", {"key": slot.name}, timeout=30)
        local._MODE.clear()


def hosts_of(cluster) -> dict[str, str]:
    return {node.name: node.host.physical_host.name
            for node in cluster.nodes.filter(released_at__isnull=True).select_related("host__physical_host")}


@pytest.mark.django_db(transaction=True)
@needs_lab
@pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}")
def test_a_slurm_cluster_over_two_hosts_works_as_one_and_a_dead_hosts_node_moves_to_another_host_by_name(
    lab, environment, owner, settings, tmp_path
):
    from accounts.services import add_ssh_key
    from clusters.node_health import tasks

    alice_key, alice_public = customer_key(tmp_path, "alice")
    key = add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=alice_public)
    with fleet_of(lab, {"lab-1": 5, "lab-2": 1}, settings, tmp_path) as machine_type:
        try:
            cluster = create_cluster(environment=environment, name="wide", machine_type=machine_type, machine_count=6,
                                     software="slurm", ssh_keys=[key])
            cluster = drive(cluster, SETTLED, timeout=300)
            assert cluster.status == Status.READY, story(cluster)
            assert hosts_of(cluster) == {**{f"node-{i}": "lab-1" for i in range(5)}, "node-5": "lab-2"}

            lines = {ep.name: ep.ssh_command for ep in connect.endpoints(cluster)}
            everyone = [f"node-{i}" for i in range(6)]
            session = customer_ssh(lines["node-0"], alice_key, (
                "ssh node-5 hostname && srun -N6 hostname | sort && "
                "mpirun -np $WORLD_SIZE --hostfile /shared/hostfile hostname | sort"))
            assert session.returncode == 0, session.stderr
            assert session.stdout.split() == ["node-5", *everyone, *everyone], session.stdout
            # The customer's line reaches the node on the other host as pasted, and its /shared
            # is the head's (over the private network, across hosts).
            far = customer_ssh(lines["node-5"], alice_key, "hostname; echo from-far > /shared/far.txt; "
                                                           "ssh node-0 cat /shared/far.txt")
            assert far.stdout.split() == ["node-5", "from-far"], far.stderr

            # node-5's host powers off: node-5 turns unhealthy in the customer's words, the others keep running.
            lab_hosts(lab["lab-2"]["dir"], "stop", "lab-2")
            found = tasks.check_cluster_health(cluster.pk)
            assert found["node-5"] == NodeHealth.UNREACHABLE, found
            assert all(found[f"node-{i}"] == NodeHealth.HEALTHY for i in range(5)), found
            assert cluster.nodes.get(index=5, released_at__isnull=True).health_detail == (
                "node-5's host stopped answering")

            # A host with a free machine comes on sale; replace puts node-5 there under its name and address.
            lab_hosts(lab["lab-1"]["dir"], "up", "5")
            [fifth] = [h for h in json.loads(lab_hosts(lab["lab-1"]["dir"], "list", "--json")) if h["name"] == "lab-5"]
            add_host(fifth, machine_type.pk, 1)
            replace_node(cluster, "node-5", actor="alice")
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and cluster.nodes.filter(index=5, released_at__isnull=True).count() > 1:
                cluster = drive(cluster, SETTLED, timeout=2)
                time.sleep(0.5)
            [new] = cluster.nodes.filter(index=5, released_at__isnull=True).select_related("host__physical_host")
            assert new.host.physical_host is not None and new.host.physical_host.name == "lab-5", story(cluster)
            assert new.state == Node.State.READY, story(cluster)
            assert new.private_ip == "10.77.0.6"
            session = customer_ssh(lines["node-0"], alice_key, "ssh node-5 hostname && srun -N6 hostname | sort")
            assert session.returncode == 0, session.stderr
            assert session.stdout.split() == ["node-5", *everyone], session.stdout
        finally:
            lab_hosts(lab["lab-2"]["dir"], "start", "lab-2")
