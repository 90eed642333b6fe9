"""The whole Fabric path on the `local` provider: real SSH servers on loopback, one per node."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from django.utils import timezone

from billing.models import MachineUsage
from clusters.models import Cluster, Node, Reason, Status
from clusters.providers.local.sandbox import find_sshd
from clusters.services.create import create_cluster
from clusters.services.progress import retry_install
from clusters.services.terminate import terminate_cluster
from clusters.services.volumes import create_volume
from clusters.services.workers import add_workers
from offers import lab
from offers.models import Host, HostFault
from tests.providers.conftest import SETTLED, drive, local_machine_type

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(find_sshd() is None, reason="OpenSSH sshd is not installed (apt-get install openssh-server)"),
]


def create(environment, machine_type, count=4, software="none", name="train"):
    return create_cluster(
        environment=environment, name=name, machine_type=machine_type, machine_count=count, software=software
    )


def node_root(local_machines: Path, node: Node) -> Path:
    return local_machines / node.host.name / "root"


def test_the_customers_ssh_keys_are_authorized_on_every_node(environment, owner, local_machines):
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from accounts.services import add_ssh_key

    public = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    key = add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=f"{public} alice@laptop")
    machine_type = local_machine_type(2, block=80)
    cluster = create_cluster(
        environment=environment, name="keys", machine_type=machine_type, machine_count=2, ssh_keys=[key]
    )
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.READY
    for node in cluster.nodes.select_related("host"):
        authorized = (node_root(local_machines, node) / "root" / ".ssh" / "authorized_keys").read_text()
        assert "alice@laptop" in authorized and "# BEGIN runcrate customer" in authorized


@pytest.mark.parametrize("software", ["none", "slurm", "kubernetes", "ray"])
def test_a_four_node_cluster_reaches_ready(environment, local_machines, software):
    machine_type = local_machine_type(4, block=10 + ["none", "slurm", "kubernetes", "ray"].index(software))
    cluster = drive(create(environment, machine_type, software=software), SETTLED)
    assert cluster.status == Status.READY, list(cluster.events.values_list("message", flat=True))
    nodes = list(cluster.nodes.select_related("host"))
    head = node_root(local_machines, nodes[0])
    hosts = (head / "etc" / "hosts").read_text()
    assert all(f"10.77.0.{i + 1}" in hosts and f"node-{i}" in hosts for i in range(4))
    wg = (head / "etc" / "wireguard" / "wg0.conf").read_text()
    assert wg.count("[Peer]") == 3 and "Address = 10.77.0.1/24" in wg
    assert (head / "shared" / "hostfile").read_text().count("slots=8") == 4
    assert all(n.log_tail for n in nodes), "every node keeps its output"
    assert len({n.billing_started_at for n in nodes}) == 1


def test_container_machines_share_no_folder(environment, local_machines):
    machine_type = local_machine_type(2, block=20, kind="container", gpus_per_machine=1)
    cluster = drive(create(environment, machine_type, count=2, software="ray"), SETTLED)
    assert cluster.status == Status.READY
    worker = node_root(local_machines, cluster.nodes.select_related("host").get(index=1))
    assert not (worker / "shared" / "hostfile").exists()


def test_a_node_that_never_joins_fails_the_cluster_and_releases_every_host(environment, local_machines):
    machine_type = local_machine_type(4, block=30)
    lab.inject(Host.objects.filter(name="local-30-2"), fault=HostFault.NEVER_JOINS)
    cluster = create(environment, machine_type)
    cluster = drive(cluster, SETTLED | {Status.PROVISIONING}, timeout=5)
    for _ in range(3):
        cluster = drive(cluster, SETTLED, timeout=3)
    assert cluster.status == Status.PROVISIONING, "it keeps trying until the deadline"
    Cluster.objects.filter(pk=cluster.pk).update(deadline_at=timezone.now() - dt.timedelta(seconds=1))
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.FAILED and cluster.failure_reason == Reason.JOIN_TIMEOUT
    assert not Host.objects.filter(state=Host.State.RESERVED).exists()
    assert not any((local_machines / h.name).exists() for h in Host.objects.all()), "machines are stopped"
    assert not MachineUsage.objects.filter(cluster=cluster).exists()


def test_a_machine_that_fails_to_boot_fails_fast(environment, local_machines):
    machine_type = local_machine_type(3, block=31)
    lab.inject(Host.objects.filter(name="local-31-1"), fault=HostFault.BOOT_FAILS)
    cluster = drive(create(environment, machine_type, count=3), SETTLED)
    assert cluster.status == Status.FAILED and cluster.failure_reason == Reason.BOOT_FAILED
    assert not Host.objects.filter(state=Host.State.RESERVED).exists()


def test_install_failure_degrades_then_retry_reaches_ready(environment, local_machines):
    machine_type = local_machine_type(4, block=40)
    lab.inject(Host.objects.filter(name="local-40-3"), fault=HostFault.INSTALL_FAILS)
    cluster = drive(create(environment, machine_type, software="slurm"), SETTLED)
    assert cluster.status == Status.DEGRADED
    assert cluster.is_billable
    failed = cluster.nodes.select_related("host").get(index=3)
    assert failed.state == Node.State.INSTALL_FAILED and "install" in failed.detail.lower()
    # The operator clears the fault in /admin/ (the host's own record, nothing on the machine);
    # the customer retries, and the retry installs on the machine as the host is now.
    lab.inject(Host.objects.filter(name="local-40-3"), fault=HostFault.NONE)
    assert (node_root(local_machines, failed) / "etc" / "runcrate" / "fault").exists()
    retry_install(cluster, actor="alice")
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.READY


def test_adding_a_worker_rejoins_every_node(environment, local_machines):
    machine_type = local_machine_type(3, block=50)
    cluster = drive(create(environment, machine_type, count=2, software="slurm"), SETTLED)
    assert cluster.status == Status.READY
    add_workers(cluster, 1, actor="alice")
    cluster = drive(cluster, SETTLED, timeout=5)
    deadline = timezone.now() + dt.timedelta(seconds=60)
    while cluster.nodes.filter(released_at__isnull=True).exclude(state=Node.State.READY).exists() and timezone.now() < deadline:
        cluster = drive(cluster, SETTLED, timeout=1)
    worker = cluster.nodes.select_related("host").get(index=2)
    assert worker.state == Node.State.READY
    head = node_root(local_machines, cluster.nodes.select_related("host").get(index=0))
    assert "node-2" in (head / "etc" / "hosts").read_text()
    assert (head / "etc" / "wireguard" / "wg0.conf").read_text().count("[Peer]") == 2
    assert (head / "shared" / "hostfile").read_text().count("slots=") == 3
    assert MachineUsage.objects.get(node=worker).started_at == worker.billing_started_at


def test_terminate_stops_and_releases_every_machine(environment, local_machines):
    machine_type = local_machine_type(2, block=60)
    cluster = drive(create(environment, machine_type, count=2), SETTLED)
    terminate_cluster(cluster, actor="alice")
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.TERMINATED
    assert not any((local_machines / h.name).exists() for h in Host.objects.all())
    assert not Host.objects.filter(state=Host.State.RESERVED).exists()


def test_local_machines_are_reached_directly_even_where_the_site_has_a_gateway(environment, local_machines):
    machine_type = local_machine_type(2, block=70)
    machine_type.location.gateway_host = "gw.us-east-1.runcrate.example"
    machine_type.location.save()
    cluster = drive(create(environment, machine_type, count=2), SETTLED)
    assert cluster.status == Status.READY
    from clusters import connect

    # The gateway is the real site's; local machines are reached on loopback directly.
    assert all(ep.proxy_jump == "" for ep in connect.endpoints(cluster))


def test_a_volume_is_synced_into_shared_on_the_head_and_back_at_terminate(environment, local_machines, settings, tmp_path):
    settings.VOLUMES_DIR = str(tmp_path / "volumes")
    volume = create_volume(environment=environment, name="corpus", size_gb=10)
    (Path(volume.source_path) / "train.txt").write_text("tokens\n")
    machine_type = local_machine_type(2, block=90)
    cluster = create_cluster(
        environment=environment, name="vol", machine_type=machine_type, machine_count=2, volume=volume
    )
    cluster = drive(cluster, SETTLED)
    assert cluster.status == Status.READY
    head = node_root(local_machines, cluster.nodes.select_related("host").get(index=0))
    assert (head / "shared" / "volume" / "train.txt").read_text() == "tokens\n"
    (head / "shared" / "volume" / "checkpoint.pt").write_text("weights\n")
    terminate_cluster(cluster, actor="alice")
    assert drive(cluster, SETTLED).status == Status.TERMINATED
    assert (Path(volume.source_path) / "checkpoint.pt").read_text() == "weights\n"


def test_a_sync_back_larger_than_the_volume_is_refused_whole_and_the_customer_is_told(
    environment, local_machines, settings, tmp_path
):
    settings.VOLUMES_DIR = str(tmp_path / "volumes")
    volume = create_volume(environment=environment, name="small", size_gb=1)
    (Path(volume.source_path) / "kept.txt").write_text("kept\n")
    machine_type = local_machine_type(2, block=91)
    cluster = drive(create_cluster(
        environment=environment, name="vol", machine_type=machine_type, machine_count=2, volume=volume
    ), SETTLED)
    assert cluster.status == Status.READY
    head = node_root(local_machines, cluster.nodes.select_related("host").get(index=0))
    with open(head / "shared" / "volume" / "checkpoint.pt", "wb") as checkpoint:
        checkpoint.truncate(1_200_000_000)  # 1.2 GB (sparse) in a 1 GB volume
    terminate_cluster(cluster, actor="alice")
    assert drive(cluster, SETTLED).status == Status.TERMINATED
    assert sorted(p.name for p in Path(volume.source_path).iterdir()) == ["kept.txt"]
    notice = cluster.events.get(event="stop_notice").message
    assert notice == ("The volume was not synced back: /shared/volume holds 1.2 GB, more than the volume's 1 GB; "
                      "the volume keeps its earlier data.")


def test_a_worker_that_never_joins_is_stopped_and_released_alone(environment, local_machines):
    machine_type = local_machine_type(3, block=72)
    lab.inject(Host.objects.filter(name="local-72-2"), fault=HostFault.NEVER_JOINS)
    cluster = drive(create(environment, machine_type, count=2), SETTLED)
    assert cluster.status == Status.READY
    add_workers(cluster, 1, actor="alice")
    for _ in range(3):
        cluster = drive(cluster, SETTLED, timeout=2)
    worker = cluster.nodes.get(index=2)
    assert worker.state == Node.State.UP, "it keeps trying until the worker's deadline"
    Node.objects.filter(pk=worker.pk).update(boot_requested_at=timezone.now() - dt.timedelta(minutes=26))
    cluster = drive(cluster, SETTLED)

    worker.refresh_from_db()
    assert worker.state == Node.State.FAILED and worker.released_at is not None
    assert not (local_machines / "local-72-2").exists()
    assert not cluster.events.filter(event="stop_error").exists(), list(cluster.events.values_list("message", flat=True))
    assert cluster.status == Status.READY and (local_machines / "local-72-0").exists()
