"""Sending a delivery (webhooks.tasks.send_webhook): claim an attempt, POST it signed with no
transaction open, record the outcome; and the sweep's claim of attempts that came due.
Creating events and deliveries is webhooks.services, which queues the tasks."""

from __future__ import annotations

import datetime as dt
import json
import logging
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from accounts.models import Workspace
from webhooks import signing, targets
from webhooks.models import Attempt, Delivery, Event, EventType

log = logging.getLogger(__name__)

USER_AGENT = "Runcrate-Webhooks/1"


def payload(event: Event, workspace: Workspace) -> bytes:
    body = {
        "id": event.public_id,
        "type": event.type,
        "created": event.created_at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z"),
        "workspace": {"id": workspace.pk, "name": workspace.name},
        "data": event.data,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def retry_delay(attempts: int) -> int:
    """Seconds before the attempt after `attempts` failed ones: growing by WEBHOOK_RETRY_FACTOR
    from the base, capped."""
    base, factor, cap = settings.WEBHOOK_RETRY_BASE_SECONDS, settings.WEBHOOK_RETRY_FACTOR, settings.WEBHOOK_RETRY_MAX_SECONDS
    return int(min(base * factor ** max(attempts - 1, 0), cap))


@dataclass(frozen=True)
class Outcome:
    status: str  # "succeeded", "retry", "failed", "skipped"
    retry_at: dt.datetime | None = None


def send_delivery(delivery_id: int, attempt: int) -> Outcome:
    """Attempt number `attempt` (0-based) of one delivery: claimed in one short statement, the
    POST made with no transaction open (a slow receiver must hold no lock: on SQLite any open
    write transaction is the whole database's), the outcome recorded in a second transaction.

    A task for an attempt that was already claimed (a duplicate, a redelivery) finds the count
    moved on and does nothing, so an attempt is made once. A worker that dies mid-POST leaves
    the attempt counted and the delivery leased: the sweep queues the next attempt when the
    lease runs out."""
    now = timezone.now()
    lease = now + dt.timedelta(seconds=settings.WEBHOOK_QUEUE_LEASE_SECONDS)
    claimed = Delivery.objects.filter(pk=delivery_id, status=Delivery.Status.PENDING, attempts=attempt).update(
        attempts=attempt + 1, next_attempt_at=lease)
    if not claimed:
        return Outcome("skipped")
    delivery = Delivery.objects.select_related("event", "endpoint", "event__workspace").get(pk=delivery_id)
    endpoint, event = delivery.endpoint, delivery.event
    body = payload(event, event.workspace)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Runcrate-Event-Id": event.public_id,
        "Runcrate-Event-Type": event.type,
        "Runcrate-Delivery-Attempt": str(attempt + 1),
        signing.HEADER: signing.sign(endpoint.secret, int(now.timestamp()), body),
    }
    if not endpoint.is_active and event.type != EventType.WEBHOOK_TEST:
        response = targets.Response(None, 0, "The endpoint was switched off.")
    else:
        if not connection.in_atomic_block:
            # Nor a database connection: back to the pool while the receiver takes its time.
            connection.close()
        response = targets.post(endpoint.url, body, headers)
    outcome = record_attempt(delivery, attempt, started=now, response=response)
    if outcome.status == "failed":
        log.warning("Gave up on webhook delivery %s to %s after %s attempts: %s",
                    delivery_id, endpoint.url, attempt + 1, response.error)
    return outcome


def record_attempt(delivery: Delivery, attempt: int, *, started: dt.datetime, response: targets.Response) -> Outcome:
    """The outcome of a claimed attempt: logged, and the delivery delivered, scheduled again
    (retry_delay after the attempt ended) or given up once the retry window is spent."""
    ended = timezone.now()
    fields: dict[str, Any] = {
        "last_attempt_at": started, "last_status_code": response.status_code,
        "last_response_ms": response.elapsed_ms, "last_error": response.error, "last_to_loopback": response.to_loopback,
    }
    if response.ok:
        fields.update(status=Delivery.Status.SUCCEEDED, delivered_at=ended, next_attempt_at=None)
        outcome = Outcome("succeeded")
    else:
        retry_at = ended + dt.timedelta(seconds=retry_delay(attempt + 1))
        window_ends = delivery.created_at + dt.timedelta(seconds=settings.WEBHOOK_RETRY_WINDOW_SECONDS)
        if retry_at > window_ends or not delivery.endpoint.is_active:
            fields.update(status=Delivery.Status.FAILED, next_attempt_at=None)
            outcome = Outcome("failed")
        else:
            fields.update(next_attempt_at=retry_at)
            outcome = Outcome("retry", retry_at)
    with transaction.atomic():
        Attempt.objects.create(delivery=delivery, at=started, status_code=response.status_code,
                               response_ms=response.elapsed_ms, error=response.error, succeeded=response.ok,
                               to_loopback=response.to_loopback)
        # Compare-and-set on the count this attempt claimed: it is always still ours unless the
        # lease ran out mid-request (a stopped worker) and a later attempt was claimed since.
        Delivery.objects.filter(pk=delivery.pk, attempts=attempt + 1, status=Delivery.Status.PENDING).update(**fields)
    return outcome


def claim_due(now: dt.datetime | None = None, limit: int = 500) -> list[tuple[int, int]]:
    """Pending deliveries whose next attempt is due, each pushed out by the queue lease as it
    is claimed (compare-and-set), so the next sweep does not queue the same attempt again."""
    now = now or timezone.now()
    lease = now + dt.timedelta(seconds=settings.WEBHOOK_QUEUE_LEASE_SECONDS)
    claimed = []
    due = Delivery.objects.filter(status=Delivery.Status.PENDING, next_attempt_at__lte=now).order_by("next_attempt_at")
    for pk, attempts, at in due.values_list("pk", "attempts", "next_attempt_at")[:limit]:
        if Delivery.objects.filter(pk=pk, next_attempt_at=at, status=Delivery.Status.PENDING).update(next_attempt_at=lease):
            claimed.append((pk, attempts))
    return claimed
