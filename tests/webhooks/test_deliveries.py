"""Lifecycle events reach a real receiver on loopback, signed; failures are retried with
backoff and logged; re-send and test-send deliver the same event again."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.utils import timezone

from clusters.models import Cluster, Reason, Status
from clusters.node_health.services import record_node_health
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from tests.factories import WorkspaceFactory
from tests.webhooks.conftest import Receiver
from webhooks import sending, services, signing, tasks
from webhooks.models import Attempt, Delivery, Endpoint, Event, EventType

pytestmark = pytest.mark.django_db(transaction=True)


def endpoint_for(workspace, receiver: Receiver, *events: str) -> Endpoint:
    return services.create_endpoint(workspace=workspace, url=receiver.url, events=events or [EventType.CLUSTER_READY])


def create(environment, machine_type, owner, count: int = 2) -> Cluster:
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=count, created_by=owner,
    )
    cluster.refresh_from_db()
    return cluster


def test_a_cluster_turning_ready_is_posted_signed_and_the_signature_verifies(receiver, workspace, environment, machine_type, owner):
    endpoint = endpoint_for(workspace, receiver, EventType.CLUSTER_READY)
    cluster = create(environment, machine_type, owner)
    assert cluster.status == Status.READY
    [request] = receiver.requests
    body = request.json
    assert body["type"] == "cluster.ready"
    assert body["data"]["cluster"]["name"] == "train" and body["data"]["cluster"]["id"] == cluster.pk
    assert body["data"]["cluster"]["price_per_hour"] == "5.00"
    assert body["workspace"]["id"] == workspace.pk
    assert request.headers["Runcrate-Event-Id"] == body["id"] and body["id"].startswith("evt_")
    assert request.headers["Runcrate-Event-Type"] == "cluster.ready"
    header = request.headers["Runcrate-Signature"]
    assert header.startswith("t=") and ",v1=" in header
    assert signing.verify(endpoint.secret, header, request.body)
    assert not signing.verify(endpoint.secret, header, request.body.replace(b"train", b"tr4in"))
    assert not signing.verify("whsec_someone-elses", header, request.body)
    delivery = Delivery.objects.get()
    assert delivery.status == Delivery.Status.SUCCEEDED and delivery.last_status_code == 200
    assert delivery.last_response_ms is not None and delivery.attempts == 1


def test_an_endpoint_gets_the_lifecycle_events_it_chose_and_no_others(receiver, workspace, environment, machine_type, owner):
    endpoint_for(workspace, receiver, EventType.CLUSTER_CREATED, EventType.CLUSTER_TERMINATED)
    cluster = create(environment, machine_type, owner)
    terminate_cluster(cluster, actor="alice")
    cluster.refresh_from_db()
    assert cluster.status == Status.TERMINATED
    assert receiver.types() == ["cluster.created", "cluster.terminated"]
    terminated = receiver.requests[1].json["data"]
    assert terminated["reason"] == Reason.USER_REQUESTED and terminated["cluster"]["status"] == "terminated"


def test_another_workspaces_events_never_reach_the_endpoint(receiver, workspace, machine_type, owner):
    endpoint_for(workspace, receiver, EventType.CLUSTER_READY)
    other = WorkspaceFactory()
    create(other.default_environment, machine_type, owner)
    assert receiver.requests == []
    assert not Event.objects.exists()


def test_node_health_changes_are_sent_with_the_node(receiver, workspace, environment, machine_type, owner):
    endpoint_for(workspace, receiver, EventType.NODE_UNHEALTHY, EventType.NODE_RECOVERED)
    cluster = create(environment, machine_type, owner, count=3)
    node = cluster.nodes.get(index=1)
    record_node_health(cluster.pk, {node.pk: ("unreachable", "ssh timed out")})
    record_node_health(cluster.pk, {node.pk: ("unreachable", "ssh timed out")})
    record_node_health(cluster.pk, {node.pk: ("healthy", "all checks passed")})
    assert receiver.types() == ["node.unhealthy", "node.recovered"]
    assert receiver.requests[0].json["data"]["node"] == {"name": "node-1", "health": "unreachable", "detail": "ssh timed out"}
    assert receiver.requests[0].json["data"]["reason"] == Reason.NODE_UNREACHABLE


def due(delivery: Delivery) -> None:
    """Let the clock reach the delivery's next attempt, and run the beat's sweep then."""
    delivery.refresh_from_db()
    assert delivery.next_attempt_at is not None
    for delivery_id, attempt in sending.claim_due(now=delivery.next_attempt_at):
        tasks.send_webhook(delivery_id, attempt)


def test_a_failing_receiver_is_retried_with_backoff_until_it_answers_and_the_log_says_so(
    receiver, workspace, environment, machine_type, owner
):
    receiver.answer(500, 503)
    endpoint_for(workspace, receiver)
    started = timezone.now()
    create(environment, machine_type, owner)
    delivery = Delivery.objects.get()
    assert delivery.status == Delivery.Status.PENDING and delivery.attempts == 1
    assert delivery.last_status_code == 500 and delivery.last_error == "HTTP 500"
    assert delivery.next_attempt_at is not None and delivery.last_attempt_at is not None
    first_wait = (delivery.next_attempt_at - started).total_seconds()
    assert 25 <= first_wait <= 40
    # Not yet due: the sweep sends nothing.
    assert sending.claim_due(now=timezone.now()) == []
    due(delivery)
    delivery.refresh_from_db()
    assert delivery.attempts == 2 and delivery.status == Delivery.Status.PENDING
    assert delivery.next_attempt_at is not None and delivery.last_attempt_at is not None
    second_wait = (delivery.next_attempt_at - delivery.last_attempt_at).total_seconds()
    assert second_wait == pytest.approx(4 * 30, abs=2)
    due(delivery)
    delivery.refresh_from_db()
    assert delivery.status == Delivery.Status.SUCCEEDED and delivery.attempts == 3
    assert [a.status_code for a in Attempt.objects.filter(delivery=delivery)] == [500, 503, 200]
    assert all(a.response_ms is not None for a in Attempt.objects.filter(delivery=delivery))
    ids = {r.headers["Runcrate-Event-Id"] for r in receiver.requests}
    assert len(receiver.requests) == 3 and len(ids) == 1  # the same event each time: dedupe by its id
    assert [r.headers["Runcrate-Delivery-Attempt"] for r in receiver.requests] == ["1", "2", "3"]


def test_a_duplicate_task_for_an_attempt_already_made_sends_nothing(receiver, workspace, environment, machine_type, owner):
    endpoint_for(workspace, receiver)
    create(environment, machine_type, owner)
    delivery = Delivery.objects.get()
    assert tasks.send_webhook(delivery.pk, 0) == "skipped"
    assert len(receiver.requests) == 1


def test_a_receiver_that_never_answers_well_is_given_up_three_days_after_the_event(
    receiver, workspace, environment, machine_type, owner
):
    receiver.answer(*[500] * 50)
    endpoint_for(workspace, receiver)
    create(environment, machine_type, owner)
    delivery = Delivery.objects.get()
    attempts_made = 1
    while delivery.status == Delivery.Status.PENDING:
        # Age the delivery to where its next attempt falls, as the clock would.
        delivery.refresh_from_db()
        assert delivery.next_attempt_at is not None and delivery.last_attempt_at is not None
        wait = delivery.next_attempt_at - delivery.last_attempt_at
        Delivery.objects.filter(pk=delivery.pk).update(created_at=delivery.created_at - wait,
                                                       next_attempt_at=timezone.now() - dt.timedelta(seconds=1))
        due(delivery)
        delivery.refresh_from_db()
        attempts_made += 1
        assert attempts_made < 40
    assert delivery.status == Delivery.Status.FAILED and delivery.next_attempt_at is None
    assert timezone.now() - delivery.created_at <= dt.timedelta(days=3, minutes=1)
    assert delivery.attempts == len(receiver.requests) == attempts_made
    assert 12 <= attempts_made <= 20


def test_retry_delays_grow_and_are_capped():
    assert [sending.retry_delay(n) for n in range(1, 8)] == [30, 120, 480, 1920, 7680, 21600, 21600]


def test_resend_delivers_the_same_event_id_again_as_a_new_delivery(receiver, workspace, environment, machine_type, owner):
    endpoint_for(workspace, receiver)
    create(environment, machine_type, owner)
    first = Delivery.objects.get()
    again = services.resend(first)
    assert again.pk != first.pk and again.manual
    assert len(receiver.requests) == 2
    assert receiver.requests[0].json["id"] == receiver.requests[1].json["id"]
    assert receiver.requests[0].body == receiver.requests[1].body


def test_a_test_event_reaches_the_endpoint_whatever_it_subscribes_to(receiver, workspace):
    endpoint = endpoint_for(workspace, receiver, EventType.BALANCE_LOW)
    services.send_test_event(endpoint)
    [request] = receiver.requests
    assert request.json["type"] == "webhook.test"
    assert signing.verify(endpoint.secret, request.headers["Runcrate-Signature"], request.body)


def test_a_switched_off_endpoint_gets_nothing(receiver, workspace, environment, machine_type, owner):
    endpoint = endpoint_for(workspace, receiver)
    services.update_endpoint(endpoint, is_active=False)
    create(environment, machine_type, owner)
    assert receiver.requests == [] and not Delivery.objects.exists()


def test_an_old_signature_is_refused_by_verify():
    body = b'{"id":"evt_1"}'
    header = signing.sign("whsec_x", int(time.time()) - 600, body)
    assert not signing.verify("whsec_x", header, body)
    assert signing.verify("whsec_x", header, body, tolerance=900)
