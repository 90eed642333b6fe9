"""The node health check's records: what a round writes, the events, and the emails as they
arrive at a real SMTP server. Rounds run through clusters.health with the simulated provider,
whose machines turn bad by their host's fault."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.utils import timezone

from clusters.models import Cluster, Node, NodeHealth, Reason, Status
from clusters.node_health import rounds
from clusters.node_health import tasks as health_tasks
from clusters.node_health.services import record_node_health
from clusters.services.create import create_cluster
from clusters.services.replace import replace_node
from clusters.services.terminate import terminate_cluster
from notifications.models import Notification
from offers import lab
from offers.models import Host, HostFault
from tests.factories import ready_cluster
from tests.notifications.conftest import subject_of, text_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cluster(environment, machine_type, owner) -> Cluster:
    return ready_cluster(environment, machine_type, owner)


def node(cluster: Cluster, index: int) -> Node:
    return cluster.nodes.select_related("host").get(index=index, replacing__isnull=True)


def break_network(cluster: Cluster, index: int, broken: bool = True) -> None:
    lab.inject(Host.objects.filter(pk=node(cluster, index).host_id), fault=HostFault.NEVER_JOINS if broken else "")


def health_events(cluster: Cluster) -> list[tuple[str, str]]:
    return list(cluster.events.filter(event__startswith="node_").order_by("id").values_list("event", "reason"))


def test_a_node_that_turns_bad_gets_an_event_and_one_email_and_one_more_when_it_recovers(smtp, cluster):
    smtp.messages.clear()  # the ready email
    assert rounds.check_cluster(cluster.pk) == {"node-0": "healthy", "node-1": "healthy", "node-2": "healthy"}
    assert smtp.messages == [] and health_events(cluster) == []

    break_network(cluster, 1)
    assert (rounds.check_cluster(cluster.pk) or {})["node-1"] == NodeHealth.NETWORK_DOWN
    bad = node(cluster, 1)
    assert bad.health == NodeHealth.NETWORK_DOWN and bad.health_detail == "wg0 is down"
    assert bad.health_changed_at == bad.health_checked_at
    assert health_events(cluster) == [("node_unhealthy", Reason.NODE_NETWORK_DOWN)]
    [message] = smtp.messages
    assert subject_of(message) == "node-1 of your cluster train is private network down"
    assert "wg0 is down" in text_of(message) and "stays ready" in text_of(message)

    # Still bad, round after round: nothing new is recorded or sent.
    rounds.check_cluster(cluster.pk)
    rounds.check_cluster(cluster.pk)
    assert len(smtp.messages) == 1 and len(health_events(cluster)) == 1
    checked_again = node(cluster, 1).health_checked_at
    assert checked_again and bad.health_checked_at and checked_again > bad.health_checked_at
    assert node(cluster, 1).health_changed_at == bad.health_changed_at

    break_network(cluster, 1, broken=False)
    rounds.check_cluster(cluster.pk)
    assert node(cluster, 1).health == NodeHealth.HEALTHY
    assert health_events(cluster) == [("node_unhealthy", Reason.NODE_NETWORK_DOWN), ("node_recovered", "")]
    assert [subject_of(m) for m in smtp.messages][1:] == ["node-1 of your cluster train is healthy again"]
    cluster.refresh_from_db()
    assert cluster.status == Status.READY, "a bad node never changes the cluster's status"

    # A second episode is its own: one more email each way.
    break_network(cluster, 1)
    rounds.check_cluster(cluster.pk)
    assert len(smtp.messages) == 3
    assert Notification.objects.filter(kind="node_unhealthy").count() == 2


def test_a_node_that_stays_bad_differently_gets_an_event_but_no_second_email(smtp, cluster):
    smtp.messages.clear()
    worker = node(cluster, 2)
    record_node_health(cluster.pk, {worker.pk: (NodeHealth.SOFTWARE_DOWN, "slurmd not running")})
    record_node_health(cluster.pk, {worker.pk: (NodeHealth.UNREACHABLE, "Does not answer over SSH")})
    assert health_events(cluster) == [
        ("node_unhealthy", Reason.NODE_SOFTWARE_DOWN), ("node_health_changed", Reason.NODE_UNREACHABLE)
    ]
    assert [subject_of(m) for m in smtp.messages] == ["node-2 of your cluster train is software down"]


def test_the_first_healthy_check_is_no_news(smtp, cluster):
    smtp.messages.clear()
    rounds.check_cluster(cluster.pk)
    assert smtp.messages == [] and health_events(cluster) == []
    assert set(cluster.nodes.values_list("health", flat=True)) == {NodeHealth.HEALTHY}


def test_the_round_skips_machines_being_swapped_in_the_node_they_replace_and_nodes_not_ready(cluster, machine_type):
    old = node(cluster, 1)
    held = Node.objects.filter(released_at__isnull=True).values("host_id")
    spare = Host.objects.filter(machine_type=machine_type).exclude(pk__in=held).first()
    assert spare is not None
    incoming = Node.objects.create(cluster=cluster, index=1, host=spare, state=Node.State.READY, replacing=old)
    Node.objects.filter(pk=node(cluster, 2).pk).update(state=Node.State.INSTALLING)

    assert rounds.check_cluster(cluster.pk) == {"node-0": "healthy"}
    incoming.refresh_from_db()
    assert incoming.health == NodeHealth.UNKNOWN and incoming.health_checked_at is None
    assert node(cluster, 1).pk == old.pk and node(cluster, 1).health == NodeHealth.UNKNOWN  # not checked
    assert node(cluster, 2).health_checked_at is None


def test_clusters_that_are_not_ready_are_not_checked(cluster):
    terminate_cluster(cluster)
    assert rounds.check_cluster(cluster.pk) is None
    assert not cluster.nodes.filter(health_checked_at__isnull=False).exists()


def test_findings_for_a_cluster_that_stopped_mid_round_are_dropped(smtp, cluster):
    smtp.messages.clear()
    worker = node(cluster, 1)
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.TERMINATING)
    assert record_node_health(cluster.pk, {worker.pk: (NodeHealth.UNREACHABLE, "gone")}) == []
    assert node(cluster, 1).health == NodeHealth.UNKNOWN and smtp.messages == []


def test_the_beat_task_checks_each_due_ready_cluster_once_and_skips_one_in_a_round(
    cluster, environment, machine_type, owner
):
    other = create_cluster(
        environment=environment, name="other", machine_type=machine_type, machine_count=2, created_by=owner,
    )
    assert rounds.due_clusters() == [cluster.pk, other.pk]
    assert rounds.claim(other.pk)  # a round for `other` is running elsewhere
    try:
        assert health_tasks.check_node_health() == 1
    finally:
        rounds.release(other.pk)
    assert not cluster.nodes.filter(health_checked_at__isnull=True).exists()
    assert not other.nodes.filter(health_checked_at__isnull=False).exists()
    # Just checked: not due again until half an interval has passed.
    assert rounds.due_clusters() == [other.pk]
    assert health_tasks.check_node_health() == 1
    assert rounds.due_clusters() == []
    assert cache.get(rounds.lock_key(cluster.pk)) is None, "each round let go of its cluster"


def test_two_rounds_that_find_the_same_change_at_once_record_and_email_it_once(smtp, cluster):
    import threading

    from django.db import connection, connections

    if connection.vendor != "postgresql":
        pytest.skip("row locks need PostgreSQL")
    smtp.messages.clear()
    worker = node(cluster, 1)
    start = threading.Barrier(2)

    def round_() -> None:
        try:
            start.wait()
            record_node_health(cluster.pk, {worker.pk: (NodeHealth.UNREACHABLE, "Does not answer over SSH")})
        finally:
            connections.close_all()

    threads = [threading.Thread(target=round_) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert health_events(cluster) == [("node_unhealthy", Reason.NODE_UNREACHABLE)]
    assert Notification.objects.filter(kind="node_unhealthy").count() == 1
    assert len(smtp.messages) == 1


def test_a_node_with_a_replacement_on_the_way_is_not_checked_until_the_swap_is_given_up(cluster):
    # The customer gave up on that machine: its software gives it no new work (a drained Ray
    # raylet leaves once idle) and from the join the new machine holds its private address,
    # so a verdict on it would only be a false alarm.
    old = node(cluster, 1)
    spare = Host.objects.create(machine_type=cluster.machine_type, name="spare")
    new = Node.objects.create(cluster=cluster, index=1, host=spare, replacing=old, state=Node.State.BOOTING)
    assert "node-1" not in (rounds.check_cluster(cluster.pk) or {})
    Node.objects.filter(pk=new.pk).update(state=Node.State.JOINED, joined_at=old.joined_at)
    assert "node-1" not in (rounds.check_cluster(cluster.pk) or {})
    # A swap given up: the old machine is the node again, and checked again.
    Node.objects.filter(pk=new.pk).update(state=Node.State.FAILED, released_at=timezone.now())
    assert (rounds.check_cluster(cluster.pk) or {}).get("node-1") == NodeHealth.HEALTHY


def test_an_unhealthy_head_is_never_suggested_for_replacement_and_the_advice_says_what_to_do_instead(smtp, cluster):
    smtp.messages.clear()
    break_network(cluster, 0)
    assert (rounds.check_cluster(cluster.pk) or {})["node-0"] == NodeHealth.NETWORK_DOWN

    [message] = cluster.events.filter(event="node_unhealthy").values_list("message", flat=True)
    assert "replace node-0" not in message
    assert "cannot be replaced" in message and "create a new cluster and terminate this one" in message
    [email] = smtp.messages
    assert "replace it" not in text_of(email) and "cannot be replaced" in text_of(email)

    # A worker still is.
    break_network(cluster, 1)
    rounds.check_cluster(cluster.pk)
    worker = cluster.events.filter(event="node_unhealthy").order_by("-id").values_list("message", flat=True)[0]
    assert "replace node-1 or terminate the cluster" in worker


def test_a_stopped_machine_carries_no_health(cluster, client, owner):
    rounds.check_cluster(cluster.pk)
    old = node(cluster, 1)
    assert old.health == NodeHealth.HEALTHY

    replace_node(Cluster.objects.get(pk=cluster.pk), "node-1", actor="alice")
    old.refresh_from_db()
    assert old.released_at is not None and (old.health, old.health_detail) == (NodeHealth.UNKNOWN, "")

    terminate_cluster(Cluster.objects.get(pk=cluster.pk), actor="alice")
    assert set(cluster.nodes.values_list("health", flat=True)) == {NodeHealth.UNKNOWN}
