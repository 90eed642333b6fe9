"""Replacing a node of a running cluster on the simulated provider: the refusals, the swap, the
failure path and what both machines are billed."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from accounts.models import Workspace
from billing import money
from billing import services as billing
from billing.models import MachineUsage
from clusters import lifecycle
from clusters.errors import ClusterError, Conflict, InsufficientCredits
from clusters.models import Cluster, Node, Status
from clusters.services.create import create_cluster
from clusters.services.replace import replace_node
from clusters.services.terminate import terminate_cluster
from clusters.services.workers import add_workers
from offers import lab
from offers.inventory import return_hosts_to_sale
from offers.models import Host, HostFault

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ready_cluster(environment, machine_type):
    cluster = create_cluster(
        environment=environment, name="swap", machine_type=machine_type, machine_count=3, software="slurm"
    )
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    return cluster


def free_host(machine_type) -> Host:
    return machine_type.hosts.filter(state=Host.State.FREE).order_by("id").first()


def live(cluster: Cluster) -> list[Node]:
    return list(cluster.nodes.filter(released_at__isnull=True).order_by("index", "pk"))


def test_a_replaced_node_keeps_its_name_and_address_on_a_new_machine(ready_cluster, machine_type):
    old = ready_cluster.nodes.get(index=1)
    taken = free_host(machine_type)

    new = replace_node(ready_cluster, "node-1", actor="alice")

    new.refresh_from_db()
    old.refresh_from_db()
    cluster = Cluster.objects.get(pk=ready_cluster.pk)
    assert new.host_id == taken.pk and new.name == "node-1" and new.private_ip == "10.77.0.2"
    assert new.replacing_id is None and new.state == Node.State.READY
    assert old.released_at is not None and old.state == Node.State.STOPPED
    assert Host.objects.get(pk=old.host_id).state == Host.State.FREE
    assert cluster.status == Status.READY and cluster.machine_count == 3
    assert [n.name for n in live(cluster)] == ["node-0", "node-1", "node-2"]
    assert [e for e in cluster.events.values_list("event", flat=True) if e.startswith(("node_", "replacement_"))] == [
        "node_replacing", "replacement_joined", "replacement_ready", "node_replaced",
    ]


def test_billing_runs_for_the_new_machine_from_its_join_and_for_the_old_one_until_it_stopped(ready_cluster):
    old = ready_cluster.nodes.get(index=2)
    new = replace_node(ready_cluster, old, actor="alice")
    new.refresh_from_db()
    old.refresh_from_db()

    old_usage, new_usage = MachineUsage.objects.get(node=old), MachineUsage.objects.get(node=new)
    assert old_usage.started_at == ready_cluster.billing_started_at
    assert old_usage.ended_at == old.billing_ended_at == old.released_at
    assert new_usage.started_at == new.billing_started_at == new.joined_at and new_usage.ended_at is None
    # The two overlap only while the new machine joins, installs and is checked.
    assert new_usage.started_at <= old_usage.ended_at
    assert MachineUsage.objects.filter(cluster=ready_cluster, ended_at__isnull=True).count() == 3

    later = timezone.now() + dt.timedelta(hours=1)
    billing.meter_usage(later)
    old_usage.refresh_from_db()
    new_usage.refresh_from_db()
    rate = ready_cluster.price_per_machine_hour
    assert old_usage.posted_amount == money.posted_total(rate, old_usage.started_at, old_usage.ended_at)
    assert new_usage.posted_amount == money.posted_total(rate, new_usage.started_at, later)


def test_never_more_open_intervals_than_machines_plus_the_one_swapped_in(ready_cluster, machine_type):
    lab.inject(Host.objects.filter(pk=free_host(machine_type).pk), fault=HostFault.NEVER_JOINS)
    replace_node(ready_cluster, "node-1")
    # The new machine is up but not joined: not billed yet, the old one still is.
    assert MachineUsage.objects.filter(cluster=ready_cluster, ended_at__isnull=True).count() == 3
    with pytest.raises(Conflict) as error:
        replace_node(ready_cluster, "node-2")
    assert error.value.code == "replacement_in_progress"
    with pytest.raises(Conflict) as error:
        add_workers(ready_cluster, 1)
    assert error.value.code == "replacement_in_progress"


def test_a_machine_that_fails_to_boot_is_released_and_the_old_one_keeps_the_node(ready_cluster, machine_type):
    old = ready_cluster.nodes.get(index=1)
    broken = free_host(machine_type)
    lab.inject(Host.objects.filter(pk=broken.pk), fault=HostFault.BOOT_FAILS)

    new = replace_node(ready_cluster, "node-1")

    new.refresh_from_db()
    old.refresh_from_db()
    assert new.state == Node.State.FAILED and new.released_at is not None
    # In the customer's words; the provider's own (which names its host) stays in the node's log.
    assert new.detail == "its machine did not start" and broken.name not in new.detail
    assert broken.name not in " ".join(Cluster.objects.get(pk=ready_cluster.pk).events.values_list("message", flat=True))
    assert old.released_at is None and old.state == Node.State.READY
    assert Host.objects.get(pk=broken.pk).state == Host.State.QUARANTINED, "a host that failed is off sale"
    assert not MachineUsage.objects.filter(node=new).exists()
    cluster = Cluster.objects.get(pk=ready_cluster.pk)
    assert cluster.status == Status.READY and cluster.machine_count == 3
    failed = cluster.events.get(event="replacement_failed")
    assert "not charged" in failed.message and old.host.name not in failed.message
    # The operator repairs the machine and returns it to sale; the customer tries again.
    lab.inject(Host.objects.filter(pk=broken.pk), fault="")
    return_hosts_to_sale([broken.pk])
    replace_node(cluster, "node-1")
    assert Node.objects.filter(cluster=cluster, index=1, released_at__isnull=True).get().host_id == broken.pk


def test_a_machine_that_never_joins_is_released_at_the_boot_deadline(ready_cluster, machine_type):
    old = ready_cluster.nodes.get(index=2)
    lab.inject(Host.objects.filter(pk=free_host(machine_type).pk), fault=HostFault.NEVER_JOINS)
    new = replace_node(ready_cluster, "node-2")
    new.refresh_from_db()
    assert new.state == Node.State.UP and new.replacing_id == old.pk
    assert ready_cluster.pk in lifecycle.needs_driving()

    Node.objects.filter(pk=new.pk).update(boot_requested_at=timezone.now() - dt.timedelta(minutes=26))
    lifecycle.advance(ready_cluster.pk)

    new.refresh_from_db()
    old.refresh_from_db()
    assert new.state == Node.State.FAILED and "within 25 minutes" in new.detail
    assert old.released_at is None
    assert ready_cluster.pk not in lifecycle.needs_driving()


def test_a_machine_whose_install_fails_is_billed_until_it_is_released(ready_cluster, machine_type):
    broken = free_host(machine_type)
    lab.inject(Host.objects.filter(pk=broken.pk), fault=HostFault.INSTALL_FAILS)

    new = replace_node(ready_cluster, "node-1")

    new.refresh_from_db()
    cluster = Cluster.objects.get(pk=ready_cluster.pk)
    assert cluster.status == Status.READY, "a failed replacement never degrades the cluster"
    assert new.state == Node.State.FAILED and new.billing_started_at is not None
    usage = MachineUsage.objects.get(node=new)
    assert usage.started_at == new.billing_started_at and usage.ended_at == new.billing_ended_at == new.released_at
    assert "billed until now" in cluster.events.get(event="replacement_failed").message


def test_terminate_during_a_replacement_stops_and_bills_both_machines_until_then(ready_cluster, machine_type):
    lab.inject(Host.objects.filter(pk=free_host(machine_type).pk), fault=HostFault.NEVER_JOINS)
    old = ready_cluster.nodes.get(index=1)
    new = replace_node(ready_cluster, "node-1")
    # It joins (the fault cleared) but the install is still running when the customer terminates.
    lab.inject(Host.objects.filter(pk=new.host_id), fault="", install_seconds=3600)
    lifecycle.advance(ready_cluster.pk)
    new.refresh_from_db()
    assert new.state == Node.State.INSTALLING and new.billing_started_at is not None

    terminate_cluster(Cluster.objects.get(pk=ready_cluster.pk), actor="alice")
    lifecycle.advance(ready_cluster.pk)

    cluster = Cluster.objects.get(pk=ready_cluster.pk)
    assert cluster.status == Status.TERMINATED
    for node in (old, new):
        node.refresh_from_db()
        assert node.released_at is not None
        assert MachineUsage.objects.get(node=node).ended_at == cluster.billing_ended_at
        assert Host.objects.get(pk=node.host_id).state == Host.State.FREE


def test_it_refuses_the_head_an_unknown_node_and_a_cluster_that_is_not_ready(ready_cluster):
    with pytest.raises(Conflict) as error:
        replace_node(ready_cluster, "node-0")
    assert error.value.code == "head_replace_refused" and "controller" in error.value.message
    with pytest.raises(ClusterError) as unknown:
        replace_node(ready_cluster, "node-9")
    assert unknown.value.code == "node_not_found" and unknown.value.status == 404
    terminate_cluster(ready_cluster)
    with pytest.raises(Conflict) as error:
        replace_node(Cluster.objects.get(pk=ready_cluster.pk), "node-1")
    assert error.value.code == "not_ready"


def test_it_says_so_when_no_machine_can_start_and_offers_nothing_else(ready_cluster, machine_type):
    machine_type.hosts.filter(state=Host.State.FREE).update(state=Host.State.DISABLED)
    with pytest.raises(Conflict) as error:
        replace_node(ready_cluster, "node-1")
    assert error.value.code == "offer_unavailable"
    assert str(machine_type) in error.value.message and "node-1 keeps running" in error.value.message
    assert live(ready_cluster) == live(Cluster.objects.get(pk=ready_cluster.pk))
    assert not Node.objects.filter(cluster=ready_cluster, replacing__isnull=False).exists()


def test_the_balance_must_cover_an_hour_of_the_cluster_and_the_machine_swapped_in(ready_cluster):
    # 4 × $2.50 = $10.00 an hour while the two machines overlap.
    Workspace.objects.filter(pk=ready_cluster.workspace_id).update(credit_balance=Decimal("9.99"))
    with pytest.raises(InsufficientCredits) as error:
        replace_node(ready_cluster, "node-1")
    assert error.value.details["required"] == "10.00"
    Workspace.objects.filter(pk=ready_cluster.workspace_id).update(credit_balance=Decimal("10.00"))
    replace_node(ready_cluster, "node-1")
