"""A waiting cluster is looked at when its machines have news, not every poll: a pass is
queued for the instant the provider's runtime says a machine is due (a boot, a join, an
install), at most CLUSTER_LOOK_AHEAD_SECONDS ahead, and the sweep leaves it queued."""

from __future__ import annotations

import pytest

from clusters import tasks
from clusters.models import Cluster, Node, Status
from clusters.services.create import create_cluster
from offers import lab
from offers.models import Host, HostFault
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def queued(monkeypatch, settings):
    """The passes the tasks queue (cluster, seconds ahead), as the broker would receive them."""
    settings.CLUSTER_SELF_RESCHEDULE = True
    sent: list[tuple[int, float]] = []
    monkeypatch.setattr(tasks.advance_cluster, "apply_async",
                        lambda args, countdown=None, **kw: sent.append((args[0], countdown or 0)))
    return sent


def create(environment, queued, count: int = 2, **host_fields) -> Cluster:
    machine_type = machine_type_with_hosts(count)
    lab.inject(Host.objects.filter(machine_type=machine_type), **host_fields)
    cluster = create_cluster(environment=environment, name="wake", machine_type=machine_type, machine_count=count)
    assert queued == [(cluster.pk, 0)]  # the create's own pass, queued on commit
    queued.clear()
    tasks.advance_cluster(cluster.pk)  # as the worker runs it
    cluster.refresh_from_db()
    return cluster


def test_a_booting_cluster_is_looked_at_when_its_machines_are_due_up_not_every_poll(environment, queued):
    cluster = create(environment, queued, boot_seconds=40)
    assert cluster.status == Status.PROVISIONING
    (cluster_id, ahead), = queued
    assert cluster_id == cluster.pk and 35 < ahead <= 40


def test_a_machine_due_beyond_the_look_ahead_is_looked_at_then_and_the_sweep_leaves_it_queued(
        environment, queued, settings):
    create(environment, queued, boot_seconds=3600)
    (_, ahead), = queued
    assert ahead == settings.CLUSTER_LOOK_AHEAD_SECONDS
    assert tasks.sweep_clusters() == 0 and len(queued) == 1


def test_machines_up_and_joining_are_looked_at_when_their_join_is_due(environment, queued):
    cluster = create(environment, queued, join_seconds=25)
    assert set(cluster.nodes.values_list("state", flat=True)) == {Node.State.UP}
    (_, ahead), = queued
    assert 20 < ahead <= 25


def test_a_machine_that_never_joins_is_looked_at_by_the_cluster_deadline(environment, queued, settings):
    settings.CLUSTER_LOOK_AHEAD_SECONDS = 24 * 3600
    cluster = create(environment, queued, fault=HostFault.NEVER_JOINS)
    (_, ahead), = queued
    left = (cluster.deadline_at - cluster.created_at).total_seconds()
    assert left - 10 < ahead <= left


def test_a_ready_cluster_is_not_looked_at_again(environment, queued):
    assert create(environment, queued).status == Status.READY
    assert queued == []
