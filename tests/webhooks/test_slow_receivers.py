"""Eight receivers that drip one header line a second (a real socket server on 127.0.0.1) hold
no database transaction and no lock while they are being posted to: another tenant's page and
create answer as usual meanwhile, and each attempt is cut off at the product's deadline,
recorded, and scheduled again like any failure."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from django.db import connection, connections
from django.test import Client

from accounts.models import Role
from api.keys import create_api_key
from clusters.models import Status
from clusters.services.create import create_cluster
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory
from tests.webhooks.conftest import DripReceiver
from webhooks import sending, services
from webhooks.models import Attempt, Delivery, EventType

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]



def open_transactions() -> list[str]:
    """Other sessions of this database that have sat inside a transaction for over a second
    (what a worker holding one across a request looks like), with the statement each ran last."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE datname = current_database() "
                       "AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid() "
                       "AND now() - xact_start > interval '1 second'")
        return [row[0] for row in cursor.fetchall()]


def send_in_a_thread(endpoint) -> threading.Thread:
    """The test event's task runs where it is queued (tasks run inline here): one thread per
    delivery, as eight worker processes would run them."""

    def send() -> None:
        try:
            services.send_test_event(endpoint)
        finally:
            connections.close_all()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_eight_drip_feeding_receivers_hold_no_transaction_and_are_cut_off_and_retried(
    drip_receivers: list[DripReceiver], workspace, machine_type, settings
):
    deadline = settings.WEBHOOK_TIMEOUT_SECONDS  # the product's own, 10 s
    endpoints = [services.create_endpoint(workspace=workspace, url=r.url, events=[EventType.CLUSTER_READY])
                 for r in drip_receivers]
    other = WorkspaceFactory()
    bob = MembershipFactory(workspace=other, role=Role.OWNER, user=UserFactory(username="bob")).user
    theirs = create_cluster(environment=other.default_environment, name="theirs", machine_type=machine_type,
                            machine_count=2, created_by=bob)
    page = Client()
    page.force_login(bob)
    _, raw = create_api_key(workspace=other, created_by=bob, name="bob")
    api = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")

    threads = [send_in_a_thread(endpoint) for endpoint in endpoints]
    try:
        for receiver in drip_receivers:  # every request is being answered, a line a second
            assert receiver.answering.acquire(timeout=60)
        assert open_transactions() == []
        # Another tenant, meanwhile: its page, and a create that needs the database's write side.
        assert page.get(f"/clusters/{theirs.pk}/").status_code == 200
        created = api.post("/api/v1/clusters", {"name": "meanwhile", "offer_id": machine_type.pk, "machines": 2},
                           content_type="application/json")
        assert created.status_code == 201, created.content
        assert api.get(f"/api/v1/clusters/{created.json()['data']['id']}").json()["data"]["status"] == Status.READY
        assert all(thread.is_alive() for thread in threads)  # all of that while every receiver still drips
    except BaseException:
        for receiver in drip_receivers:
            receiver.close()
        raise
    finally:
        for thread in threads:
            thread.join(timeout=10 * deadline)
    assert not any(thread.is_alive() for thread in threads)

    deliveries = list(Delivery.objects.filter(endpoint__in=endpoints))
    assert len(deliveries) == 8
    for delivery in deliveries:
        [attempt] = Attempt.objects.filter(delivery=delivery)
        assert attempt.status_code is None and not attempt.succeeded
        assert attempt.error == f"No complete answer within {deadline} s: the request was cut off."
        assert attempt.response_ms is not None and attempt.response_ms >= deadline * 1000
        assert delivery.status == Delivery.Status.PENDING and delivery.attempts == 1
        assert delivery.last_error == attempt.error
        # Retried on the schedule: the first retry comes 30 s after the attempt ended.
        assert delivery.next_attempt_at is not None
        ended = attempt.at + dt.timedelta(milliseconds=attempt.response_ms)
        assert abs((delivery.next_attempt_at - ended).total_seconds() - settings.WEBHOOK_RETRY_BASE_SECONDS) < 2
    assert all(receiver.requests == 1 for receiver in drip_receivers)
    # The sweep queues the second attempt of each when it comes due, not before.
    due_at = sorted(d.next_attempt_at for d in deliveries if d.next_attempt_at)
    assert sending.claim_due(now=due_at[0] - dt.timedelta(seconds=1)) == []
    latest = due_at[-1]
    assert sorted(sending.claim_due(now=latest)) == sorted((d.pk, 1) for d in deliveries)
