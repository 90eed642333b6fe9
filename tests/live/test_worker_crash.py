"""A worker killed mid-join never wedges its cluster: the lease lapses, the sweep re-drives it
on another worker, and the customer is told the step was interrupted."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from clusters.models import Cluster, Node, Status
from clusters.services.create import create_cluster
from offers import lab
from tests.factories import machine_type_with_hosts
from tests.live.processes import Processes, RedisServer, publish_to, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

JOIN_SECONDS = 4  # each join works this long inside the worker, as a real one over SSH does


@pytest.fixture
def stack(tmp_path):
    redis = RedisServer(tmp_path)
    processes = Processes(
        tmp_path, redis.url, SIMULATED_JOIN_WORK_SECONDS=str(JOIN_SECONDS), SWEEP_INTERVAL_SECONDS="2",
        CLUSTER_LEASE_SECONDS="6",
    )
    restore = publish_to(redis.url)
    try:
        yield processes
    finally:
        restore()
        processes.stop()
        redis.stop()


def test_a_worker_killed_mid_join_leaves_a_cluster_that_another_worker_brings_to_ready(environment, stack):
    stack.worker("first")
    stack.beat()
    machine_type = machine_type_with_hosts(2)
    cluster = create_cluster(environment=environment, name="crash", machine_type=machine_type, machine_count=2)

    def joining() -> bool:
        row = Cluster.objects.get(pk=cluster.pk)
        up = Node.objects.filter(cluster=cluster, state=Node.State.UP).count() == 2
        return up and row.lease_expires_at is not None and row.status == Status.PROVISIONING

    assert wait_for(joining, 60), stack.log("first")
    time.sleep(1)  # well inside the join
    stack.kill("first")
    killed = time.monotonic()
    assert Cluster.objects.get(pk=cluster.pk).status == Status.PROVISIONING

    stack.worker("second")
    assert wait_for(lambda: Cluster.objects.get(pk=cluster.pk).status == Status.READY, 45), stack.log("second")
    assert time.monotonic() - killed < 30
    events = list(Cluster.objects.get(pk=cluster.pk).events.values_list("event", flat=True))
    assert "pass_interrupted" in events and events[-1] == "ready", events


@pytest.fixture
def slow_polling_stack(tmp_path):
    """Passes 5 s apart: most of the time the worker holds the next pass, due in a few seconds."""
    redis = RedisServer(tmp_path)
    processes = Processes(tmp_path, redis.url, SWEEP_INTERVAL_SECONDS="2", CLUSTER_POLL_SECONDS="5",
                          CLUSTER_LEASE_SECONDS="6")
    restore = publish_to(redis.url)
    try:
        yield processes
    finally:
        restore()
        processes.stop()
        redis.stop()


def test_a_pass_lost_with_a_killed_worker_is_re_driven_within_half_a_minute(environment, slow_polling_stack):
    from django.utils import timezone

    from offers.models import Host

    stack = slow_polling_stack
    stack.worker("first")
    stack.beat()
    machine_type = machine_type_with_hosts(2)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=12)
    cluster = create_cluster(environment=environment, name="lost", machine_type=machine_type, machine_count=2)

    def waiting_for_its_next_pass() -> bool:
        row = Cluster.objects.get(pk=cluster.pk)
        return (row.lease_expires_at is None and row.advance_queued_at is not None
                and row.advance_queued_at > timezone.now() + dt.timedelta(seconds=1))

    assert wait_for(waiting_for_its_next_pass, 60, step=0.05), stack.log("first")
    stack.kill("first")  # it held that pass (an ETA task, unacknowledged): lost with it
    killed = time.monotonic()
    due = Cluster.objects.get(pk=cluster.pk).advance_queued_at
    stack.worker("second")

    def re_driven() -> bool:
        return Cluster.objects.get(pk=cluster.pk).advance_queued_at != due

    assert wait_for(re_driven, 45, step=0.2), stack.log("second") + stack.log("beat")
    assert time.monotonic() - killed < 30
    assert wait_for(lambda: Cluster.objects.get(pk=cluster.pk).status == Status.READY, 60), stack.log("second")
