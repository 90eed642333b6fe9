"""A cluster's whole life on the simulated provider, every fault included."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import LedgerEntry, MachineUsage
from clusters import lifecycle
from clusters.errors import ClusterError, Conflict, InsufficientCredits
from clusters.models import Cluster, Node, Reason, Status
from clusters.services import progress
from clusters.services.create import create_cluster
from clusters.services.lease import claim_lease, release_lease
from clusters.services.progress import append_node_logs, retry_install, update_nodes
from clusters.services.terminate import refuse_node_termination, terminate_cluster
from offers import lab
from offers.models import Host, HostFault
from tests.factories import HostFactory, machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)


def create(environment, machine_type, count=4, software="none", name="train", **kwargs) -> Cluster:
    return create_cluster(
        environment=environment, name=name, machine_type=machine_type, machine_count=count, software=software, **kwargs
    )


def drive(cluster: Cluster) -> Cluster:
    lifecycle.advance(cluster.pk)
    cluster.refresh_from_db()
    return cluster


def test_it_reaches_ready_without_software_and_starts_billing_at_one_instant(environment, machine_type):
    cluster = create(environment, machine_type)
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    starts = set(cluster.nodes.values_list("billing_started_at", flat=True))
    assert cluster.billing_started_at is not None
    assert starts == {cluster.billing_started_at}
    assert MachineUsage.objects.filter(cluster=cluster, started_at=cluster.billing_started_at).count() == 4
    assert [n.private_ip for n in cluster.nodes.all()] == ["10.77.0.1", "10.77.0.2", "10.77.0.3", "10.77.0.4"]
    assert cluster.events.filter(event="ready").exists()


@pytest.mark.parametrize("software", ["slurm", "kubernetes", "ray"])
def test_it_installs_software_then_is_ready(environment, machine_type, software):
    cluster = create(environment, machine_type, software=software)
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    assert list(cluster.events.values_list("event", flat=True)) == ["created", "joined", "ready"]


def test_it_waits_while_machines_boot_then_proceeds(environment, machine_type):
    lab.inject(Host.objects, boot_seconds=60)
    cluster = create(environment, machine_type)
    cluster.refresh_from_db()
    assert cluster.status == Status.PROVISIONING
    assert set(cluster.nodes.values_list("state", flat=True)) == {Node.State.BOOTING}
    Node.objects.filter(cluster=cluster).update(boot_requested_at=timezone.now() - dt.timedelta(seconds=61))
    assert drive(cluster).status == Status.READY


def test_a_machine_that_fails_to_boot_fails_the_cluster_and_releases_every_host(environment, machine_type):
    hosts = list(machine_type.hosts.order_by("id"))
    lab.inject(Host.objects.filter(pk=hosts[2].pk), fault=HostFault.BOOT_FAILS)
    cluster = create(environment, machine_type)
    cluster.refresh_from_db()
    assert cluster.status == Status.FAILED
    assert cluster.failure_reason == Reason.BOOT_FAILED
    assert cluster.billing_started_at is None
    assert not Host.objects.filter(state=Host.State.RESERVED).exists()
    assert not cluster.nodes.filter(released_at__isnull=True).exists()
    assert not MachineUsage.objects.filter(cluster=cluster).exists()
    assert not LedgerEntry.objects.filter(cluster=cluster).exists()
    failed = cluster.events.get(event="failed")
    assert failed.reason == Reason.BOOT_FAILED and "nothing was charged" in failed.message


def test_a_machine_that_never_joins_fails_the_cluster_at_the_deadline(environment, machine_type):
    first = machine_type.hosts.order_by("id").first()
    lab.inject(Host.objects.filter(pk=first.pk), fault=HostFault.NEVER_JOINS)
    cluster = create(environment, machine_type)
    cluster.refresh_from_db()
    assert cluster.status == Status.PROVISIONING
    Cluster.objects.filter(pk=cluster.pk).update(deadline_at=timezone.now() - dt.timedelta(seconds=1))
    cluster = drive(cluster)
    assert cluster.status == Status.FAILED
    assert cluster.failure_reason == Reason.JOIN_TIMEOUT
    assert Host.objects.filter(state=Host.State.RESERVED).count() == 0
    assert cluster.billing_started_at is None
    # Only the machine that never joined is blamed.
    assert list(cluster.nodes.filter(state=Node.State.FAILED).values_list("index", flat=True)) == [0]
    assert "node-0 late" in cluster.events.get(event="failed").message


def test_slow_machine_types_get_their_own_deadline(environment):
    slow = machine_type_with_hosts(2, kind="bare_metal", boot_deadline_minutes=45)
    cluster = create(environment, slow, count=2)
    assert cluster.deadline_at - cluster.created_at >= dt.timedelta(minutes=44, seconds=59)


def test_an_install_failure_degrades_and_retry_reaches_ready(environment, machine_type):
    last = machine_type.hosts.order_by("id")[3]
    lab.inject(Host.objects.filter(pk=last.pk), fault=HostFault.INSTALL_FAILS)
    cluster = create(environment, machine_type, software="slurm")
    cluster.refresh_from_db()
    assert cluster.status == Status.DEGRADED
    assert cluster.is_billable, "degraded machines stay up and billed"
    assert cluster.events.get(event="degraded").reason == Reason.INSTALL_FAILED
    assert cluster.nodes.get(index=3).state == Node.State.INSTALL_FAILED
    lab.inject(Host.objects.filter(pk=last.pk), fault="")
    retry_install(cluster, actor="alice")
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    assert cluster.install_attempts == 1


def test_retry_install_is_refused_unless_degraded(environment, machine_type):
    cluster = create(environment, machine_type)
    with pytest.raises(Conflict):
        retry_install(cluster)


def test_terminate_from_degraded_ends_billing_and_releases(environment, machine_type):
    lab.inject(Host.objects, fault=HostFault.INSTALL_FAILS)
    cluster = create(environment, machine_type, software="ray")
    cluster.refresh_from_db()
    assert cluster.status == Status.DEGRADED
    assert terminate_cluster(cluster, actor="alice")
    cluster.refresh_from_db()
    assert cluster.status == Status.TERMINATED
    assert cluster.termination_reason == Reason.USER_REQUESTED
    assert cluster.billing_ended_at is not None
    assert set(MachineUsage.objects.filter(cluster=cluster).values_list("ended_at", flat=True)) == {cluster.billing_ended_at}
    assert Host.objects.filter(state=Host.State.RESERVED).count() == 0


def test_terminate_while_provisioning_bills_nothing(environment, machine_type):
    lab.inject(Host.objects, boot_seconds=300)
    cluster = create(environment, machine_type)
    assert terminate_cluster(cluster)
    cluster.refresh_from_db()
    assert cluster.status == Status.TERMINATED
    assert cluster.billing_started_at is None and cluster.billing_ended_at is None
    assert not LedgerEntry.objects.filter(cluster=cluster).exists()


def test_terminating_twice_is_harmless(environment, machine_type):
    cluster = create(environment, machine_type)
    assert terminate_cluster(cluster)
    assert not terminate_cluster(Cluster.objects.get(pk=cluster.pk))
    assert Cluster.objects.get(pk=cluster.pk).events.filter(event="terminating").count() == 1


def test_one_node_cannot_be_terminated_on_its_own(environment, machine_type):
    cluster = create(environment, machine_type)
    with pytest.raises(Conflict) as refused:
        refuse_node_termination(cluster, "node-2")
    assert refused.value.code == "node_terminate_refused"
    assert "Terminate the whole cluster" in refused.value.message


def test_advancing_a_ready_cluster_again_changes_nothing(environment, machine_type):
    cluster = create(environment, machine_type)
    cluster.refresh_from_db()
    events = cluster.events.count()
    assert lifecycle.advance(cluster.pk) is None
    assert cluster.events.count() == events


def test_a_held_lease_keeps_a_second_worker_out(environment, machine_type):
    lab.inject(Host.objects, boot_seconds=300)
    cluster = create(environment, machine_type)
    lease = claim_lease(cluster.pk)
    assert lease is not None
    assert lifecycle.advance(cluster.pk) is None
    # The refused pass asked the holder to look again before letting go.
    assert release_lease(lease) is False
    assert release_lease(lease) is True
    assert lifecycle.advance(cluster.pk) is not None


def test_releasing_a_lease_taken_over_by_another_worker_leaves_it_held(environment, machine_type):
    lab.inject(Host.objects, boot_seconds=300)
    cluster = create(environment, machine_type)
    stale = claim_lease(cluster.pk)
    assert stale is not None
    Cluster.objects.filter(pk=cluster.pk).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    current = claim_lease(cluster.pk)
    assert current is not None
    release_lease(stale)
    assert Cluster.objects.get(pk=cluster.pk).lease_expires_at == current.expires_at
    assert lifecycle.advance(cluster.pk) is None


def test_the_sweep_redrives_stuck_clusters(environment, machine_type):
    from clusters.tasks import sweep_clusters

    lab.inject(Host.objects, boot_seconds=300)
    cluster = create(environment, machine_type)
    Node.objects.filter(cluster=cluster).update(boot_requested_at=timezone.now() - dt.timedelta(seconds=301))
    assert sweep_clusters() == 1
    assert Cluster.objects.get(pk=cluster.pk).status == Status.READY


class TestCreateRefuses:
    def test_counts_outside_2_to_64(self, environment, machine_type):
        for count in (1, 65, 0):
            with pytest.raises(ClusterError) as error:
                create(environment, machine_type, count=count)
            assert error.value.field == "machines"

    def test_kubernetes_on_container_offers(self, environment):
        container = machine_type_with_hosts(2, kind="container")
        with pytest.raises(ClusterError) as error:
            create(environment, container, count=2, software="kubernetes")
        assert error.value.code == "kubernetes_unsupported"

    def test_a_volume_on_community_offers(self, environment):
        from clusters.models import Volume

        community = machine_type_with_hosts(2, community=True)
        volume = Volume.objects.create(workspace=environment.workspace, environment=environment, name="data")
        with pytest.raises(ClusterError) as error:
            create(environment, community, count=2, volume=volume)
        assert error.value.code == "volume_on_community"

    def test_a_balance_below_one_hour_of_the_cluster(self, environment, machine_type):
        environment.workspace.__class__.objects.filter(pk=environment.workspace_id).update(credit_balance=Decimal("9.99"))
        with pytest.raises(InsufficientCredits) as error:
            create(environment, machine_type, count=4)  # 4 × $2.50 = $10.00
        assert error.value.details == {"required": "10.00", "available": "9.99"}
        assert not Cluster.objects.exists()
        assert not Host.objects.filter(state=Host.State.RESERVED).exists()

    def test_never_less_than_ten_dollars(self, environment):
        cheap = machine_type_with_hosts(2, price_per_machine_hour=Decimal("0.40"))
        environment.workspace.__class__.objects.filter(pk=environment.workspace_id).update(credit_balance=Decimal("9.00"))
        with pytest.raises(InsufficientCredits) as error:
            create(environment, cheap, count=2)
        assert error.value.details["required"] == "10.00"

    def test_an_offer_that_can_no_longer_start(self, environment, machine_type):
        with pytest.raises(Conflict) as error:
            create(environment, machine_type, count=7)
        assert error.value.code == "offer_unavailable"
        assert not Cluster.objects.exists()

    def test_a_name_already_live_in_the_environment(self, environment, machine_type):
        create(environment, machine_type, count=2, name="dup")
        with pytest.raises(ClusterError) as error:
            create(environment, machine_type, count=2, name="dup")
        assert error.value.field == "name"


def test_a_host_can_never_be_held_by_two_live_nodes(environment, machine_type):
    from django.db import IntegrityError, transaction

    cluster = create(environment, machine_type, count=2)
    node = cluster.nodes.earliest("index")
    other = create(environment, machine_type, count=2, name="other")
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.filter(pk=other.nodes.earliest("index").pk).update(host=node.host)


def test_hosts_become_free_again_after_termination(environment, machine_type):
    cluster = create(environment, machine_type, count=6)
    terminate_cluster(cluster)
    again = create(environment, machine_type, count=6, name="again")
    assert Cluster.objects.get(pk=again.pk).status == Status.READY
    assert HostFactory._meta.model.objects.filter(state="reserved").count() == 6


def test_a_provider_error_is_shown_once_and_retried(environment, machine_type, monkeypatch):
    from clusters.providers.simulated import SimulatedProvider

    calls = []

    def broken(self, node):
        calls.append(node.pk)
        raise RuntimeError("power controller unreachable")

    monkeypatch.setattr(SimulatedProvider, "boot", broken)
    cluster = create(environment, machine_type)
    assert lifecycle.advance(cluster.pk) is not None
    errors = cluster.events.filter(event="step_error")
    assert errors.count() == 1 and "power controller unreachable" in errors.get().message
    assert errors.get().reason == Reason.PROVIDER_ERROR
    monkeypatch.undo()
    assert drive(cluster).status == Status.READY


def test_terminating_a_cluster_read_before_it_joined_still_ends_its_billing(environment, machine_type):
    lab.inject(Host.objects, boot_seconds=300)
    cluster = create(environment, machine_type)
    read_while_provisioning = Cluster.objects.get(pk=cluster.pk)
    assert read_while_provisioning.billing_started_at is None
    lab.inject(Host.objects, boot_seconds=0)
    Node.objects.filter(cluster=cluster).update(boot_requested_at=timezone.now() - dt.timedelta(minutes=10))
    drive(cluster)
    assert cluster.status == Status.READY and cluster.billing_started_at is not None

    assert terminate_cluster(read_while_provisioning)
    cluster.refresh_from_db()
    assert cluster.billing_ended_at is not None
    assert set(MachineUsage.objects.filter(cluster=cluster).values_list("ended_at", flat=True)) == {cluster.billing_ended_at}


def test_a_retry_from_a_stale_page_still_counts_a_new_attempt(environment, machine_type):
    lab.inject(Host.objects, fault=HostFault.INSTALL_FAILS)
    cluster = create(environment, machine_type, software="slurm")
    stale = Cluster.objects.get(pk=cluster.pk)
    retry_install(Cluster.objects.get(pk=cluster.pk))  # another tab: attempt 1 degrades again
    assert Cluster.objects.get(pk=cluster.pk).status == Status.DEGRADED

    retry_install(stale)
    assert stale.install_attempts == 2
    assert Cluster.objects.get(pk=cluster.pk).install_attempts == 2


def test_a_provisioning_pass_pushes_once_for_all_its_nodes_not_once_per_node(environment, machine_type, monkeypatch):
    from clusters import notices

    machine_type = machine_type_with_hosts(16)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=300)
    pushes: list[int] = []
    monkeypatch.setattr(notices, "cluster_changed", lambda cluster_id, nodes=None: pushes.append(cluster_id))
    cluster = create(environment, machine_type, count=16)
    assert set(cluster.nodes.values_list("state", flat=True)) == {Node.State.BOOTING}
    # The create, the sixteen boots, and their output lines: a few pushes, not one per node.
    assert len(pushes) <= 3, pushes


def test_output_arriving_after_the_install_does_not_make_the_next_pass_install_again(environment, machine_type):
    # The install's last lines are written when the pass ends, after the node was marked as
    # installed: they must not relabel it, or every later pass would install again.
    cluster = create(environment, machine_type, software="slurm")
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.INSTALLING)
    node = cluster.nodes.earliest("index")
    update_nodes(
        cluster.pk, [(node, {"state": Node.State.INSTALLING, "installed_at": timezone.now(), "step": "checking readiness"})]
    )
    append_node_logs(cluster.pk, {node.pk: [("install_software:daemons", "slurmd started")]})
    node.refresh_from_db()
    assert node.installed_at is not None and node.step == "checking readiness"
    assert "slurmd started" in node.log_tail


@pytest.mark.parametrize("append", [progress._append_in_place, progress._append_here],
                         ids=["in PostgreSQL", "in Python"])
def test_a_log_tail_keeps_its_last_characters_counts_every_one_and_relabels_only_a_working_node(
    environment, machine_type, append,
):
    """The same rules whether PostgreSQL appends (production) or Python does (SQLite)."""
    from django.db import connection, transaction

    if append is progress._append_in_place and connection.vendor != "postgresql":
        pytest.skip("PostgreSQL appends in place only on PostgreSQL")
    cluster = create(environment, machine_type, count=3, software="slurm")
    working, installed, settled = cluster.nodes.order_by("index")
    Node.objects.filter(pk=working.pk).update(log_tail="x" * 10, log_written=25, step="install", installed_at=None,
                                              state=Node.State.INSTALLING)
    Node.objects.filter(pk=installed.pk).update(log_tail="", log_written=0, step="checking readiness",
                                                installed_at=timezone.now(), state=Node.State.INSTALLING)
    Node.objects.filter(pk=settled.pk).update(log_tail="", log_written=0, step="ready", state=Node.State.READY)
    texts = {working.pk: "é" * 8 + "\n", installed.pk: "late line\n", settled.pk: ""}
    steps = {working.pk: "install_software:daemons", installed.pk: "install_software:daemons", settled.pk: "install"}
    with transaction.atomic():
        assert append(texts, steps, 12) == sorted(texts)
    rows = {node.pk: node for node in Node.objects.filter(cluster=cluster)}
    assert rows[working.pk].log_tail == "xxx" + "é" * 8 + "\n" and rows[working.pk].log_written == 34
    assert rows[working.pk].step == "install_software:daemons"
    assert rows[installed.pk].log_tail == "late line\n" and rows[installed.pk].step == "checking readiness"
    assert rows[settled.pk].log_tail == "" and rows[settled.pk].log_written == 0 and rows[settled.pk].step == "ready"


def test_output_with_nul_bytes_is_kept_without_them(environment, machine_type):
    # A node's program may print NUL bytes; the lines around them still reach the node's log.
    cluster = create(environment, machine_type, software="slurm")
    node = cluster.nodes.earliest("index")
    append_node_logs(cluster.pk, {node.pk: [("install", "before\x00after"), ("install", "\x00"), ("install", "next")]})
    node.refresh_from_db()
    assert "install: beforeafter\n" in node.log_tail and "install: next\n" in node.log_tail
    assert "\x00" not in node.log_tail
