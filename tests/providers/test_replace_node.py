"""Replacing a node over the real Fabric path: the `local` provider's loopback sandboxes, and
once on real Linux nodes (namespaces, wireguard-go, munge, slurmctld/slurmd)."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path

import pytest
from django.utils import timezone

from billing import money
from billing.models import MachineUsage
from clusters import lifecycle
from clusters.models import Cluster, Node, Status
from clusters.providers.local.sandbox import find_sshd
from clusters.services.create import create_cluster
from clusters.services.replace import replace_node
from clusters.services.terminate import terminate_cluster
from offers import lab
from offers.models import Host, HostFault
from tests.providers.conftest import SETTLED, drive, local_machine_type, terminal_stdin
from tests.providers.test_real_nodes import CAN, WHY, real_machine_type, real_machines, story  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(find_sshd() is None, reason="OpenSSH sshd is not installed (apt-get install openssh-server)"),
]


def drive_swap(cluster: Cluster, timeout: float = 90) -> Cluster:
    """Run the reconciler until no machine is being swapped in any more."""
    deadline = time.monotonic() + timeout
    while Node.objects.filter(cluster=cluster, released_at__isnull=True, replacing__isnull=False).exists():
        assert time.monotonic() < deadline, list(cluster.events.values_list("message", flat=True))
        lifecycle.advance(cluster.pk)
        time.sleep(0.2)
    cluster.refresh_from_db()
    return cluster


def root_of(machines: Path, node: Node) -> Path:
    return machines / node.host.name / "root"


def peer_block(wg_conf: str, name: str) -> str:
    """The [Peer] block of `name` in a wg0.conf."""
    return next(block for block in wg_conf.split("[Peer]") if f"# {name}\n" in block)


def test_a_replaced_slurm_node_runs_on_the_new_machine_under_its_name(environment, local_machines):
    machine_type = local_machine_type(4, block=31)
    cluster = create_cluster(
        environment=environment, name="swap", machine_type=machine_type, machine_count=3, software="slurm"
    )
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.READY
    old = cluster.nodes.select_related("host").get(index=1)
    head = root_of(local_machines, cluster.nodes.select_related("host").get(index=0))
    old_peer = peer_block((head / "etc/wireguard/wg0.conf").read_text(), "node-1")

    new = replace_node(cluster, "node-1", actor="alice")
    cluster = drive_swap(cluster)

    new = Node.objects.select_related("host").get(pk=new.pk)
    assert new.replacing_id is None and new.state == Node.State.READY and new.host.name == "local-31-3"
    assert cluster.status == Status.READY
    new_root = root_of(local_machines, new)
    assert (new_root / "etc/hostname").read_text().strip() == "node-1"
    assert "10.77.0.2\tnode-1" in (new_root / "etc/hosts").read_text()
    assert "Address = 10.77.0.2/24" in (new_root / "etc/wireguard/wg0.conf").read_text()
    # Every peer now sends node-1's traffic to the new machine, under a key of its own.
    peer = peer_block((head / "etc/wireguard/wg0.conf").read_text(), "node-1")
    assert f"Endpoint = {new.host.address}:51820" in peer
    assert peer.split("PublicKey = ")[1].split()[0] != old_peer.split("PublicKey = ")[1].split()[0]
    assert "/shared" in (new_root / "etc/runcrate/node.env").read_text() or (new_root / "shared").exists()
    # The controller knows node-1 as the new machine, and the old machine's stop left it so.
    registered = head / "var/lib/runcrate-sim/slurm/registered/node-1"
    assert registered.read_text().splitlines()[1] == (new_root / "etc/runcrate/machine-id").read_text().strip()
    assert not (local_machines / old.host.name).exists(), "the old machine was stopped and released"
    assert Host.objects.get(pk=old.host_id).state == Host.State.FREE
    # The key the new machine joined with is node-1's key from now on: a later join keeps it.
    secrets = Cluster.objects.get(pk=cluster.pk).plain_node_secrets["wireguard"]
    assert f"replacement-{new.pk}" not in secrets
    assert secrets["node-1"][1] == peer.split("PublicKey = ")[1].split()[0]


def test_a_replacement_that_never_joins_is_released_and_the_old_machine_stays_the_node(environment, local_machines):
    machine_type = local_machine_type(3, block=32)
    lab.inject(Host.objects.filter(name="local-32-2"), fault=HostFault.NEVER_JOINS)
    cluster = drive(
        create_cluster(environment=environment, name="stay", machine_type=machine_type, machine_count=2),
        SETTLED,
    )
    assert cluster.status == Status.READY
    old = cluster.nodes.select_related("host").get(index=1)
    head = root_of(local_machines, cluster.nodes.select_related("host").get(index=0))

    new = replace_node(cluster, "node-1")
    for _ in range(3):
        lifecycle.advance(cluster.pk)
    new.refresh_from_db()
    assert new.state == Node.State.UP, "it keeps trying until the boot deadline"
    Node.objects.filter(pk=new.pk).update(boot_requested_at=timezone.now() - dt.timedelta(minutes=26))
    cluster = drive_swap(cluster)

    new.refresh_from_db()
    assert new.state == Node.State.FAILED and new.released_at is not None
    assert not (local_machines / "local-32-2").exists()
    # The machine that never joined is released and kept out of sale until an operator looks.
    assert Host.objects.get(name="local-32-2").state == Host.State.QUARANTINED
    assert not MachineUsage.objects.filter(node=new).exists()
    # The peers were given the old machine back.
    assert f"Endpoint = {old.host.address}:51820" in peer_block((head / "etc/wireguard/wg0.conf").read_text(), "node-1")
    old.refresh_from_db()
    assert old.released_at is None and (local_machines / old.host.name).exists()
    assert cluster.status == Status.READY
    assert "replacement_failed" in cluster.events.values_list("event", flat=True)


def test_terminating_during_a_swap_stops_both_machines_each_in_its_own_spec(environment, local_machines):
    machine_type = local_machine_type(3, block=34)
    lab.inject(Host.objects.filter(name="local-34-2"), fault=HostFault.NEVER_JOINS)
    cluster = drive(
        create_cluster(environment=environment, name="both", machine_type=machine_type, machine_count=2),
        SETTLED,
    )
    old = cluster.nodes.select_related("host").get(index=1)
    new = replace_node(cluster, "node-1")
    for _ in range(2):
        lifecycle.advance(cluster.pk)
    new.refresh_from_db()
    assert new.state == Node.State.UP and (local_machines / "local-34-2").exists()

    terminate_cluster(cluster, actor="alice")
    cluster = drive(cluster, SETTLED)

    assert cluster.status == Status.TERMINATED
    assert not cluster.events.filter(event="stop_error").exists(), list(cluster.events.values_list("message", flat=True))
    for node in (old, new):
        node.refresh_from_db()
        assert node.released_at is not None and not (local_machines / node.host.name).exists()
    assert not Host.objects.filter(state=Host.State.RESERVED).exists()


# --- real nodes --------------------------------------------------------------------------------


def sinfo(handle) -> dict[str, str]:
    from clusters.providers.local import realnodes

    result = realnodes.run_in(handle, ["sinfo", "-N", "-h", "-o", "%N %T"], timeout=30)
    return dict(line.split() for line in result.stdout.splitlines() if line.strip())


@pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}")
def test_replacing_a_real_slurm_node_keeps_the_cluster_ready_and_bills_both_machines(
    environment, owner, real_machines, client
):
    import os
    import signal
    from decimal import Decimal

    from api.keys import create_api_key
    from api.schemas import timestamp
    from clusters.models import NodeHealth
    from clusters.node_health import tasks
    from clusters.providers.local import realnodes
    from clusters.providers.local.provider import HostRuntimeProvider
    from tests.providers.test_node_health import pids_named, rounds_until

    machine_type = real_machine_type(4)
    cluster = create_cluster(
        environment=environment, name="swap", machine_type=machine_type, machine_count=3, software="slurm"
    )
    cluster = drive(cluster, SETTLED, timeout=300)
    assert cluster.status == Status.READY, story(cluster)
    provider = HostRuntimeProvider()
    old = cluster.nodes.select_related("host").get(index=1)
    old_handle = realnodes.running(provider._dir(old.host))
    assert old_handle is not None
    old_namespaces = realnodes.namespaces(old_handle)
    # node-1's slurmd dies: the health check says so, and the customer replaces the machine.
    for pid in pids_named(real_machines, old, "slurmd"):
        os.kill(pid, signal.SIGKILL)
    assert rounds_until(cluster, 1, NodeHealth.SOFTWARE_DOWN, rounds=5)[0], "node-1 never turned software_down"

    new = replace_node(cluster, "node-1", actor="alice")
    cluster = drive_swap(cluster, timeout=300)

    new = Node.objects.select_related("host").get(pk=new.pk)
    old.refresh_from_db()
    assert cluster.status == Status.READY and new.state == Node.State.READY, story(cluster)
    head = realnodes.running(provider._dir(cluster.nodes.select_related("host").get(index=0).host))
    new_handle = realnodes.running(provider._dir(new.host))
    assert head is not None and new_handle is not None
    assert realnodes.run_in(new_handle, ["hostname"]).stdout.strip() == "node-1"
    assert sinfo(head) == {"node-0": "idle", "node-1": "idle", "node-2": "idle"}
    with terminal_stdin() as stdin:
        ran = realnodes.run_in(head, ["srun", "-N3", "hostname"], timeout=90, stdin=stdin)
    assert sorted(ran.stdout.split()) == ["node-0", "node-1", "node-2"], ran.stderr
    # node-1's job ran on the new machine: the old one is gone, namespaces and processes.
    assert realnodes.running(provider._dir(old.host)) is None
    assert realnodes.processes_in(old_namespaces) == []
    # The cluster is whole and healthy again, the new machine checked like the others.
    assert tasks.check_cluster_health(cluster.pk) == {f"node-{i}": NodeHealth.HEALTHY for i in range(3)}

    # Both machines' rows: the old one from the cluster's join to its stop, the new one from its join.
    old_usage, new_usage = MachineUsage.objects.get(node=old), MachineUsage.objects.get(node=new)
    assert old_usage.started_at == cluster.billing_started_at and old_usage.ended_at == old.released_at
    assert new_usage.started_at == new.billing_started_at == new.joined_at and new_usage.ended_at is None
    terminate_cluster(cluster, actor="alice")
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.TERMINATED
    new_usage.refresh_from_db()
    old_usage.refresh_from_db()
    rate = cluster.price_per_machine_hour
    assert new_usage.ended_at == cluster.billing_ended_at
    for usage in (old_usage, new_usage):
        assert usage.billed_until == usage.ended_at
        assert usage.posted_amount == money.posted_total(rate, usage.started_at, usage.ended_at)
    # The bill: one line for the cluster, a row per machine, node-1 twice (old, then new).
    key = create_api_key(workspace=environment.workspace, created_by=owner, name="bill")[1]
    [listed] = client.get("/api/v1/billing/usage", HTTP_AUTHORIZATION=f"Bearer {key}").json()["data"]
    assert listed["machines"] == 4 and listed["rows"] is None
    line = client.get(f"/api/v1/billing/usage/{cluster.pk}", HTTP_AUTHORIZATION=f"Bearer {key}").json()["data"]
    assert line["amount"] == listed["amount"]
    assert [r["node"] for r in line["rows"]] == ["node-0", "node-1", "node-1", "node-2"]
    assert Decimal(line["amount"]) == sum(Decimal(r["amount"]) for r in line["rows"])
    node_1 = sorted((r["start"], r["end"], Decimal(r["amount"])) for r in line["rows"] if r["node"] == "node-1")
    assert node_1 == sorted(
        (timestamp(u.started_at), timestamp(u.ended_at), u.posted_amount) for u in (old_usage, new_usage)
    )
