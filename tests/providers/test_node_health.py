"""The node health check on real nodes: a real Slurm cluster (namespaces, wireguard-go,
slurmd), whose daemons are killed by pid and started again as an operator would."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from api.keys import create_api_key
from clusters.models import Cluster, Node, NodeHealth, Reason, Status
from clusters.node_health import rounds
from clusters.node_health import tasks as health_tasks
from clusters.providers.local import realnodes
from clusters.services.create import create_cluster
from notifications.models import Notification
from tests.providers.conftest import SETTLED, drive
from tests.providers.test_real_nodes import handle, on_node, real_machine_type, real_machines, story, wait_for  # noqa: F401

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
]


def pids_named(real_machines: Path, node: Node, name: str) -> list[int]:
    """Host pids of the processes called `name` inside that node's own PID namespace."""
    found = []
    for pid in realnodes.processes_in({"pid": realnodes.namespaces(handle(real_machines, node))["pid"]}):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                found.append(pid)
        except OSError:
            continue
    return found


def rounds_until(cluster: Cluster, index: int, wanted: str, rounds: int) -> tuple[int, dict[str, str]]:
    """Run the beat's per-cluster task up to `rounds` times; the round it saw `wanted`."""
    found: dict[str, str] = {}
    for number in range(1, rounds + 1):
        found = health_tasks.check_cluster_health(cluster.pk) or {}
        if found.get(f"node-{index}") == wanted:
            return number, found
        time.sleep(1)
    return 0, found


def test_killing_wireguard_go_or_slurmd_turns_that_node_unhealthy_and_restarting_it_healthy(
    environment, owner, real_machines, client
):
    machine_type = real_machine_type(3)
    cluster = create_cluster(
        environment=environment, name="watch", machine_type=machine_type, machine_count=3, software="slurm",
        created_by=owner,
    )
    cluster = drive(cluster, SETTLED, timeout=150)
    assert cluster.status == Status.READY, story(cluster)
    # What a round costs is bench/real_health_bench.py's to measure.
    assert health_tasks.check_cluster_health(cluster.pk) == {f"node-{i}": NodeHealth.HEALTHY for i in range(3)}
    nodes = list(cluster.nodes.select_related("host").order_by("index"))

    # wireguard-go of node-1 dies: node-1 has lost the private network, its peers have not.
    [wireguard] = pids_named(real_machines, nodes[1], "wireguard-go")
    os.kill(wireguard, signal.SIGKILL)
    # Dead, not dying: a round while it still exits sees wg0 and a daemon, and peers it cannot reach.
    assert wait_for(lambda: not pids_named(real_machines, nodes[1], "wireguard-go"), timeout=30)
    number, found = rounds_until(cluster, 1, NodeHealth.NETWORK_DOWN, rounds=2)
    assert number, found
    assert found["node-0"] == found["node-2"] == NodeHealth.HEALTHY
    assert "wg0 is down" in cluster.nodes.get(index=1).health_detail

    # The API and the page say so.
    _, key = create_api_key(workspace=environment.workspace, created_by=owner, name="watch")
    detail = client.get(f"/api/v1/clusters/{cluster.pk}", headers={"Authorization": f"Bearer {key}"}).json()["data"]
    assert [n["health"] for n in detail["nodes"]] == ["healthy", "network_down", "healthy"]
    assert detail["unhealthy_nodes"] == 1 and detail["status"] == "ready"
    client.force_login(owner)
    page = client.get(f"/clusters/{cluster.pk}/").content.decode()
    assert "node-1 is private network down" in page and "Private network down" in page

    # Brought back up the way join_network.sh does: healthy again, with a handshake.
    up = on_node(real_machines, nodes[1], "WG_QUICK_USERSPACE_IMPLEMENTATION=wireguard-go "
                                          "WG_I_PREFER_BUGGY_USERSPACE_TO_POLISHED_KMOD=1 wg-quick up wg0")
    assert up.returncode == 0, up.stderr
    number, found = rounds_until(cluster, 1, NodeHealth.HEALTHY, rounds=3)
    assert number, found

    # slurmd on node-2 dies: its software is down; the rest of the cluster is fine.
    assert on_node(real_machines, nodes[2], "kill -9 $(cat /run/slurmd.pid)").returncode == 0
    number, found = rounds_until(cluster, 2, NodeHealth.SOFTWARE_DOWN, rounds=2)
    assert number, found
    assert found["node-0"] == found["node-1"] == NodeHealth.HEALTHY
    assert cluster.nodes.get(index=2).health_detail == "slurmd not running"
    assert on_node(real_machines, nodes[2], "slurmd").returncode == 0
    number, found = rounds_until(cluster, 2, NodeHealth.HEALTHY, rounds=3)
    assert number, found

    events = list(cluster.events.filter(event__startswith="node_").order_by("id").values_list("event", "reason"))
    assert events == [
        ("node_unhealthy", Reason.NODE_NETWORK_DOWN), ("node_recovered", ""),
        ("node_unhealthy", Reason.NODE_SOFTWARE_DOWN), ("node_recovered", ""),
    ]
    kinds = list(Notification.objects.filter(workspace=environment.workspace, kind__startswith="node_")
                 .order_by("id").values_list("kind", flat=True))
    assert kinds == ["node_unhealthy", "node_recovered", "node_unhealthy", "node_recovered"]
    assert rounds.due_clusters() == [], "every node was just checked"


def test_wg0_set_down_on_one_node_is_that_nodes_fault_alone_and_the_head_is_never_suggested_for_replacement(
    environment, owner, real_machines
):
    cluster = create_cluster(
        environment=environment, name="blame", machine_type=real_machine_type(2), machine_count=2, software="none",
        created_by=owner,
    )
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)
    assert health_tasks.check_cluster_health(cluster.pk) == {"node-0": NodeHealth.HEALTHY, "node-1": NodeHealth.HEALTHY}
    nodes = list(cluster.nodes.select_related("host").order_by("index"))

    # The interface stays, set down (wireguard-go keeps running): node-1's own check fails,
    # so the lost link is node-1's; node-0, which merely cannot reach it, stays healthy.
    assert on_node(real_machines, nodes[1], "ip link set wg0 down").returncode == 0
    found = health_tasks.check_cluster_health(cluster.pk)
    assert found == {"node-0": NodeHealth.HEALTHY, "node-1": NodeHealth.NETWORK_DOWN}, found
    assert cluster.nodes.get(index=1).health_detail == "wg0 is down"
    assert "cannot reach node-1" in cluster.nodes.get(index=0).health_detail
    assert on_node(real_machines, nodes[1], "ip link set wg0 up && ip route replace 10.77.0.0/24 dev wg0").returncode == 0

    # The head's own wg0 down: the head alone, and the advice is not to replace it.
    assert on_node(real_machines, nodes[0], "ip link set wg0 down").returncode == 0
    found = health_tasks.check_cluster_health(cluster.pk)
    assert found == {"node-0": NodeHealth.NETWORK_DOWN, "node-1": NodeHealth.HEALTHY}, found
    advice = cluster.events.filter(event="node_unhealthy").order_by("-id").values_list("message", flat=True)[0]
    assert advice.startswith("node-0 is private network down: wg0 is down.") and "replace node-0" not in advice
    assert "cannot be replaced" in advice


def test_a_node_whose_pid_1_died_is_unhealthy_because_the_machine_stopped_at_the_next_round(
    environment, owner, real_machines
):
    """The node's root can end its own PID 1 (through ptrace); every process of the node dies
    with it. The next round says so in the customer's words, not as a node that merely does
    not answer, and its peer is not blamed for the link it lost."""
    cluster = create_cluster(
        environment=environment, name="ended", machine_type=real_machine_type(2), machine_count=2, software="none",
        created_by=owner,
    )
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)
    assert health_tasks.check_cluster_health(cluster.pk) == {"node-0": NodeHealth.HEALTHY, "node-1": NodeHealth.HEALTHY}
    node = cluster.nodes.select_related("host").get(index=1)
    pid = handle(real_machines, node).pid

    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not Path(f"/proc/{pid}").exists(), timeout=30)
    found = health_tasks.check_cluster_health(cluster.pk)
    assert found == {"node-0": NodeHealth.HEALTHY, "node-1": NodeHealth.UNREACHABLE}, found
    assert cluster.nodes.get(index=1).health_detail == "The machine stopped"
    event = cluster.events.filter(event="node_unhealthy").get()
    assert event.reason == Reason.NODE_UNREACHABLE
    assert event.message.startswith("node-1 is unreachable: The machine stopped.")
