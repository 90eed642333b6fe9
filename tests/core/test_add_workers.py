"""Adding workers to a running cluster on the simulated provider."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.utils import timezone

from billing.models import MachineUsage
from clusters import lifecycle
from clusters.errors import ClusterError, Conflict, InsufficientCredits
from clusters.models import Cluster, Node, Status
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from clusters.services.workers import add_workers, mark_workers_joined
from offers import lab
from offers.inventory import return_hosts_to_sale
from offers.models import Host, HostFault

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ready_cluster(environment, machine_type):
    cluster = create_cluster(
        environment=environment, name="grow", machine_type=machine_type, machine_count=2, software="slurm"
    )
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    return cluster


def test_a_worker_joins_and_is_billed_from_when_it_is_up(ready_cluster):
    workers = add_workers(ready_cluster, 1, actor="alice")
    cluster = Cluster.objects.get(pk=ready_cluster.pk)
    worker = Node.objects.get(pk=workers[0].pk)
    assert cluster.machine_count == 3
    assert worker.name == "node-2" and worker.private_ip == "10.77.0.3"
    assert worker.state == Node.State.READY
    assert worker.billing_started_at is not None and cluster.billing_started_at is not None
    assert worker.billing_started_at > cluster.billing_started_at
    usage = MachineUsage.objects.get(node=worker)
    assert usage.started_at == worker.billing_started_at
    assert cluster.status == Status.READY
    assert list(cluster.events.values_list("event", flat=True))[-3:] == ["workers_added", "workers_joined", "workers_ready"]


def test_a_worker_that_fails_to_boot_is_released_alone(ready_cluster, machine_type):
    free = machine_type.hosts.filter(state=Host.State.FREE).order_by("id").first()
    lab.inject(Host.objects.filter(pk=free.pk), fault=HostFault.BOOT_FAILS)
    add_workers(ready_cluster, 1)
    cluster = Cluster.objects.get(pk=ready_cluster.pk)
    assert cluster.status == Status.READY
    assert cluster.machine_count == 2
    worker = cluster.nodes.get(index=2)
    assert worker.state == Node.State.FAILED and worker.released_at is not None
    assert Host.objects.get(pk=free.pk).state == Host.State.QUARANTINED, "a host that failed is off sale"
    assert not MachineUsage.objects.filter(node=worker).exists()


def test_a_worker_that_never_joins_is_released_at_its_deadline(ready_cluster, machine_type):
    free = machine_type.hosts.filter(state=Host.State.FREE).order_by("id").first()
    lab.inject(Host.objects.filter(pk=free.pk), fault=HostFault.NEVER_JOINS)
    add_workers(ready_cluster, 1)
    worker = Node.objects.get(cluster=ready_cluster, index=2)
    assert worker.state == Node.State.UP
    Node.objects.filter(pk=worker.pk).update(boot_requested_at=timezone.now() - dt.timedelta(minutes=26))
    lifecycle.advance(ready_cluster.pk)
    worker.refresh_from_db()
    assert worker.state == Node.State.FAILED
    assert Cluster.objects.get(pk=ready_cluster.pk).machine_count == 2


def test_a_worker_install_failure_degrades_the_cluster(ready_cluster, machine_type):
    free = machine_type.hosts.filter(state=Host.State.FREE).order_by("id").first()
    lab.inject(Host.objects.filter(pk=free.pk), fault=HostFault.INSTALL_FAILS)
    add_workers(ready_cluster, 1)
    assert Cluster.objects.get(pk=ready_cluster.pk).status == Status.DEGRADED


def test_adding_needs_the_balance_for_the_whole_grown_cluster(ready_cluster):
    ready_cluster.workspace.__class__.objects.filter(pk=ready_cluster.workspace_id).update(credit_balance=Decimal("12.00"))
    with pytest.raises(InsufficientCredits) as error:
        add_workers(ready_cluster, 4)  # 6 × $2.50 = $15.00
    assert error.value.details["required"] == "15.00"
    assert Cluster.objects.get(pk=ready_cluster.pk).machine_count == 2


def test_adding_is_refused_unless_ready_and_within_64(ready_cluster):
    with pytest.raises(ClusterError):
        add_workers(ready_cluster, 63)
    with pytest.raises(Conflict):
        add_workers(ready_cluster, 10)  # only 4 free hosts
    terminate_cluster(ready_cluster)
    with pytest.raises(Conflict):
        add_workers(Cluster.objects.get(pk=ready_cluster.pk), 1)


def test_terminating_keeps_the_host_of_a_released_worker_that_another_cluster_holds(
    ready_cluster, environment, machine_type
):
    free = machine_type.hosts.filter(state=Host.State.FREE).order_by("id").first()
    lab.inject(Host.objects.filter(pk=free.pk), fault=HostFault.BOOT_FAILS)
    add_workers(ready_cluster, 1)
    assert Host.objects.get(pk=free.pk).state == Host.State.QUARANTINED
    lab.inject(Host.objects.filter(pk=free.pk), fault="")
    return_hosts_to_sale([free.pk])  # the operator checked it
    other = create_cluster(environment=environment, name="other", machine_type=machine_type, machine_count=4)
    assert other.nodes.filter(host=free).exists()

    terminate_cluster(Cluster.objects.get(pk=ready_cluster.pk))
    lifecycle.advance(ready_cluster.pk)

    assert Cluster.objects.get(pk=ready_cluster.pk).status == Status.TERMINATED
    assert Host.objects.get(pk=free.pk).state == Host.State.RESERVED


def test_a_worker_that_joins_after_terminate_was_requested_is_never_billed(ready_cluster, machine_type):
    free = machine_type.hosts.filter(state=Host.State.FREE).order_by("id").first()
    lab.inject(Host.objects.filter(pk=free.pk), fault=HostFault.NEVER_JOINS)
    add_workers(ready_cluster, 1)
    worker = Node.objects.get(cluster=ready_cluster, index=2)
    assert worker.state == Node.State.UP
    # The grow step saw the worker join, then a terminate committed before it recorded that.
    stale = Cluster.objects.get(pk=ready_cluster.pk)
    terminate_cluster(Cluster.objects.get(pk=ready_cluster.pk))

    assert mark_workers_joined(stale, [worker]) is False
    assert not MachineUsage.objects.filter(node=worker).exists()
    assert not MachineUsage.objects.filter(cluster=ready_cluster, ended_at__isnull=True).exists()
