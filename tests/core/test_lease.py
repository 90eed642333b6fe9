"""A pass holds a short lease renewed by its heartbeat; a lapsed one is re-driven and said;
a pass asked for while the lease is held is taken by the holder before it lets go."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest
from django.db import connection
from django.utils import timezone

from clusters import lifecycle, tasks
from clusters.models import Cluster, Node, Status
from clusters.services.create import create_cluster
from clusters.services.lease import claim_lease, lease_length
from clusters.services.terminate import terminate_cluster
from offers import lab
from offers.models import Host
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)


def create(environment, machine_type, name="lease") -> Cluster:
    return create_cluster(environment=environment, name=name, machine_type=machine_type, machine_count=2)


@pytest.fixture
def booting(environment):
    machine_type = machine_type_with_hosts(2)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=300)
    return create(environment, machine_type)


def test_a_lease_left_by_a_dead_worker_lapses_and_the_customer_is_told(booting):
    # The holder's heartbeat stopped (its worker died) a moment ago: the lease lapsed.
    Cluster.objects.filter(pk=booting.pk).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    Node.objects.filter(cluster=booting).update(boot_requested_at=timezone.now() - dt.timedelta(seconds=301))
    lifecycle.advance(booting.pk)
    booting.refresh_from_db()
    assert booting.status == Status.READY
    interrupted = booting.events.get(event="pass_interrupted")
    assert "stopped mid-step" in interrupted.message


def test_a_lease_is_short(settings):
    assert lease_length() <= dt.timedelta(seconds=30)


def test_a_running_pass_keeps_renewing_its_lease(settings, booting):
    settings.CLUSTER_LEASE_SECONDS = 1
    lease = claim_lease(booting.pk)
    assert lease is not None
    with lifecycle.Heartbeat(lease) as heartbeat:
        time.sleep(2.5)
        # Past twice its length, the lease is still held by this pass, not lapsed.
        assert claim_lease(booting.pk) is None
        expires_at = Cluster.objects.get(pk=booting.pk).lease_expires_at
        assert expires_at is not None and expires_at > timezone.now()
        assert heartbeat.release() is True
    assert Cluster.objects.get(pk=booting.pk).lease_expires_at is None


@pytest.mark.postgres
def test_a_terminate_during_a_pass_is_acted_on_as_that_pass_ends(settings, environment):
    """No beat, no self-rescheduling: only the wake-up mark can bring the terminate on."""
    settings.SIMULATED_JOIN_WORK_SECONDS = 2
    settings.CLUSTER_SELF_RESCHEDULE = False
    machine_type = machine_type_with_hosts(2)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=300)
    cluster = create(environment, machine_type)
    Node.objects.filter(cluster=cluster).update(boot_requested_at=timezone.now() - dt.timedelta(seconds=301))

    def holder() -> None:
        try:
            lifecycle.advance(cluster.pk)  # boots, then joins for 2 s holding the lease
        finally:
            connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    deadline = time.monotonic() + 10
    while not Node.objects.filter(cluster=cluster, state=Node.State.UP).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    requested = time.monotonic()
    assert terminate_cluster(Cluster.objects.get(pk=cluster.pk))
    while Cluster.objects.get(pk=cluster.pk).status != Status.TERMINATED and time.monotonic() < requested + 10:
        time.sleep(0.05)
    terminated = time.monotonic()
    thread.join()
    assert Cluster.objects.get(pk=cluster.pk).status == Status.TERMINATED
    # The join (at most 2 s) ran on; the terminate followed it at once (the bench measures
    # about a second at load 14 on this 2-CPU machine; the bound leaves room for that load).
    # Without the wake-up mark it would never come: no beat, no self-rescheduling.
    assert terminated - requested < settings.SIMULATED_JOIN_WORK_SECONDS + 2, terminated - requested


def test_the_sweep_does_not_queue_a_cluster_whose_pass_is_queued(settings, booting, monkeypatch):
    published = []
    monkeypatch.setattr(tasks.advance_cluster, "apply_async", lambda args, **kw: published.append(args[0]))
    assert tasks.sweep_clusters() == 1
    assert tasks.sweep_clusters() == 0  # its pass is still in the queue
    assert published == [booting.pk]
    # A pass queued so long ago that its task was lost is queued again.
    Cluster.objects.filter(pk=booting.pk).update(
        advance_queued_at=timezone.now() - dt.timedelta(seconds=settings.CLUSTER_QUEUED_GRACE_SECONDS + 1)
    )
    assert tasks.sweep_clusters() == 1
