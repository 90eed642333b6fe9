"""After a worker crash or a Redis outage the control plane picks up again within about half
a minute: a lost queued pass, a network test whose worker died and a test queued while Redis
was down are each re-driven by the next sweep, not minutes later."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from clusters import tasks
from clusters.models import Cluster, NetworkTest, Status
from clusters.network_test import run
from clusters.network_test import tasks as network_test_tasks
from clusters.network_test.services import claim_network_test, start_network_test
from clusters.services.create import create_cluster
from offers import lab
from offers.models import Host
from tests.api.conftest import drive, make_cluster
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)

RECOVERY_SECONDS = 30


def ago(seconds: float) -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=seconds)


@pytest.fixture
def published(monkeypatch):
    sent: list[int] = []
    monkeypatch.setattr(tasks.advance_cluster, "apply_async", lambda args, **kw: sent.append(args[0]))
    return sent


@pytest.fixture
def booting(environment):
    machine_type = machine_type_with_hosts(2)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=300)
    return create_cluster(environment=environment, name="boot", machine_type=machine_type, machine_count=2)


@pytest.fixture
def ready(environment, monkeypatch):
    """A ready cluster whose network tests are queued, not run inline: the test drives them."""
    monkeypatch.setattr(network_test_tasks.run_network_test, "delay", lambda test_id: None)
    cluster = make_cluster(environment, machine_type_with_hosts(2), name="net", machines=2)
    drive(cluster)
    assert cluster.status == Status.READY
    return cluster


def test_a_pass_whose_worker_died_holding_it_is_queued_again_by_the_next_sweep(booting, published, settings):
    # The worker took the pass (due 20 s ago) and died before starting it: the broker keeps it
    # unacknowledged for its visibility timeout (an hour). The sweeps after the grace re-drive it.
    Cluster.objects.filter(pk=booting.pk).update(advance_queued_at=ago(20), lease_expires_at=None)
    assert settings.CLUSTER_QUEUED_GRACE_SECONDS + settings.SWEEP_INTERVAL_SECONDS <= RECOVERY_SECONDS
    assert tasks.sweep_clusters() == 1
    assert published == [booting.pk]


def test_a_pass_due_a_moment_ago_is_left_to_its_worker(booting, published):
    Cluster.objects.filter(pk=booting.pk).update(advance_queued_at=ago(2), lease_expires_at=None)
    assert tasks.sweep_clusters() == 0 and published == []


def test_a_network_test_whose_worker_died_fails_within_half_a_minute_and_a_new_one_starts(ready, settings):
    test = start_network_test(ready, actor="alice")
    claim_network_test(test.pk)
    # The runner's last heartbeat was 25 s ago; the test started 26 s ago.
    NetworkTest.objects.filter(pk=test.pk).update(started_at=ago(26), alive_at=ago(25))
    assert settings.NETWORK_TEST_STALE_SECONDS + settings.SWEEP_INTERVAL_SECONDS <= RECOVERY_SECONDS + 5
    assert network_test_tasks.sweep_network_tests()["failed"] == 1
    assert NetworkTest.objects.get(pk=test.pk).status == NetworkTest.Status.FAILED
    assert start_network_test(ready, actor="alice").status == NetworkTest.Status.QUEUED


def test_a_long_network_test_whose_runner_is_alive_is_left_running(ready):
    test = start_network_test(ready, actor="alice")
    claim_network_test(test.pk)
    NetworkTest.objects.filter(pk=test.pk).update(started_at=ago(600), alive_at=ago(2))
    assert network_test_tasks.sweep_network_tests()["failed"] == 0
    assert NetworkTest.objects.get(pk=test.pk).status == NetworkTest.Status.RUNNING


def test_the_runner_beats_while_it_measures(ready):
    test = start_network_test(ready, actor="alice")
    claim_network_test(test.pk)
    NetworkTest.objects.filter(pk=test.pk).update(alive_at=ago(60))
    with run.Heartbeat(test.pk, interval=0.1):
        time.sleep(0.5)
    alive_at = NetworkTest.objects.get(pk=test.pk).alive_at
    assert alive_at is not None and alive_at > ago(5)


def test_a_network_test_queued_while_redis_was_down_is_queued_by_the_first_sweep_after(ready, monkeypatch):
    def broker_down(*args, **kwargs):
        raise ConnectionError("Redis is down")

    monkeypatch.setattr(network_test_tasks.run_network_test, "delay", broker_down)
    test = start_network_test(ready, actor="alice")  # its publish failed after the commit
    assert NetworkTest.objects.get(pk=test.pk).status == NetworkTest.Status.QUEUED

    ran: list[int] = []
    monkeypatch.setattr(network_test_tasks.run_network_test, "delay", lambda test_id: ran.append(test_id))
    # Redis is back a few seconds later: the very next sweep queues it, no grace to sit out.
    assert network_test_tasks.sweep_network_tests() == {"failed": 0, "queued_again": 1}
    assert ran == [test.pk]
    assert network_test_tasks.sweep_network_tests()["queued_again"] == 0  # and not again while it waits its turn
