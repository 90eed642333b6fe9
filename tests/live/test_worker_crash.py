"""A worker killed mid-join never wedges its cluster: the lease lapses, the sweep re-drives it
on another worker, and the customer is told the step was interrupted."""

from __future__ import annotations

import time

import pytest

from clusters import services
from clusters.models import Cluster, Node, Status
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
    cluster = services.create_cluster(environment=environment, name="crash", machine_type=machine_type, machine_count=2)

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
