"""Every state change of webhooks: endpoints, events, deliveries and their attempts.

    emit(workspace_id, EventType.CLUSTER_READY, data, dedupe_key="cluster-event:42")

is called inside the transaction that makes the change: it records the event once (a
duplicate key records nothing), makes one delivery per active endpoint that wants it, and
after commit queues a task per delivery. A delivery that fails is tried again with backoff
(settings.WEBHOOK_RETRY_*) until WEBHOOK_RETRY_WINDOW_SECONDS after it was made (3 days),
then given up. Every attempt is logged with its status and response time."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, Max, OuterRef, QuerySet
from django.utils import timezone

from accounts.models import Workspace
from audit.recording import record
from config.errors import DomainError
from config.sealing import seal
from webhooks import targets
from webhooks.models import SUBSCRIBABLE, Attempt, Delivery, Endpoint, Event, EventType, new_event_id, new_secret
from webhooks.tasks import send_webhook

log = logging.getLogger(__name__)

MAX_ENDPOINTS_PER_WORKSPACE = 20


# --- endpoints --------------------------------------------------------------------------


def _clean_events(events: Iterable[str]) -> list[str]:
    chosen = list(dict.fromkeys(events))
    unknown = [e for e in chosen if e not in SUBSCRIBABLE]
    if unknown:
        raise DomainError("unknown_event", f"Unknown event type(s): {', '.join(unknown)}. Choose from "
                          f"{', '.join(SUBSCRIBABLE)}.", field="events")
    if not chosen:
        raise DomainError("no_events", "Choose at least one event.", field="events")
    return [e for e in SUBSCRIBABLE if e in chosen]


def create_endpoint(*, workspace: Workspace, url: str, events: Iterable[str], description: str = "",
                    created_by: User | None = None) -> Endpoint:
    """A new endpoint with a fresh signing secret. The URL is resolved and refused when any of
    its addresses is private or loopback (webhooks.targets)."""
    chosen = _clean_events(events)
    target = targets.check_url(url)
    with transaction.atomic():
        # Counted under the workspace's row lock, so two creates cannot both pass the cap.
        Workspace.objects.select_for_update().filter(pk=workspace.pk).first()
        if Endpoint.objects.filter(workspace=workspace).count() >= MAX_ENDPOINTS_PER_WORKSPACE:
            raise DomainError("too_many_endpoints", f"A workspace has at most {MAX_ENDPOINTS_PER_WORKSPACE} webhook "
                              "endpoints; remove one first.")
        endpoint = Endpoint.objects.create(
            workspace=workspace, url=target.url, events=chosen, description=description.strip()[:200],
            sealed_secret=seal({"secret": new_secret()}), created_by=created_by,
        )
        record(workspace.pk, "webhook.create", endpoint, label=_logged_url(endpoint.url),
               after=_logged(endpoint.__dict__))
        return endpoint


def _logged_url(url: str) -> str:
    """A URL as the audit log keeps it: without its query or fragment, where tokens are often put."""
    return url.split("?", 1)[0].split("#", 1)[0]


def _logged(fields: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {k: fields[k] for k in ("url", "events", "description", "is_active") if k in fields}
    if "url" in kept:
        kept["url"] = _logged_url(kept["url"])
    return kept


def update_endpoint(endpoint: Endpoint, *, url: str | None = None, events: Iterable[str] | None = None,
                    description: str | None = None, is_active: bool | None = None) -> Endpoint:
    fields: dict[str, Any] = {}
    if events is not None:
        fields["events"] = _clean_events(events)
    if url is not None:
        fields["url"] = targets.check_url(url).url
    if description is not None:
        fields["description"] = description.strip()[:200]
    if is_active is not None:
        fields["is_active"] = is_active
    if fields:
        with transaction.atomic():
            Endpoint.objects.filter(pk=endpoint.pk).update(**fields)
            record(endpoint.workspace_id, "webhook.update", endpoint, label=_logged_url(endpoint.url),
                   before=_logged({k: getattr(endpoint, k) for k in fields}), after=_logged(fields))
        for key, value in fields.items():
            setattr(endpoint, key, value)
    return endpoint


def rotate_secret(endpoint: Endpoint) -> str:
    sealed = seal({"secret": new_secret()})
    with transaction.atomic():
        Endpoint.objects.filter(pk=endpoint.pk).update(sealed_secret=sealed)
        # That the secret changed, never what it is.
        record(endpoint.workspace_id, "webhook.rotate_secret", endpoint, label=_logged_url(endpoint.url),
               before={"secret": "old"}, after={"secret": "new"})
    endpoint.sealed_secret = sealed
    return endpoint.secret


def delete_endpoint(endpoint: Endpoint) -> None:
    with transaction.atomic():
        record(endpoint.workspace_id, "webhook.delete", endpoint, label=_logged_url(endpoint.url),
               before=_logged(endpoint.__dict__))
        endpoint.delete()


# --- events -----------------------------------------------------------------------------


def emit(workspace_id: int, event_type: str, data: dict[str, Any], *, dedupe_key: str) -> Event | None:
    """Record one event and queue its deliveries after commit. None when no endpoint of the
    workspace wants it (nothing is stored) or the key was recorded already (a duplicate)."""
    endpoints = [e for e in Endpoint.objects.filter(workspace_id=workspace_id, is_active=True) if e.wants(event_type)]
    if not endpoints:
        return None
    try:
        # A savepoint: a duplicate leaves the caller's transaction usable.
        with transaction.atomic():
            event = Event.objects.create(workspace_id=workspace_id, type=event_type, data=data, dedupe_key=dedupe_key)
    except IntegrityError:
        return None
    _deliver(event, endpoints)
    return event


def _deliver(event: Event, endpoints: list[Endpoint], *, manual: bool = False) -> list[Delivery]:
    now = timezone.now()
    # Due a little later in case the task queued at commit is lost (a broker hiccup): then the
    # sweep sends it.
    due = now + dt.timedelta(seconds=settings.WEBHOOK_QUEUE_LEASE_SECONDS)
    deliveries = Delivery.objects.bulk_create(
        [Delivery(event=event, endpoint=endpoint, next_attempt_at=due, manual=manual) for endpoint in endpoints]
    )
    ids = [d.pk for d in deliveries]
    transaction.on_commit(lambda: _queue([(pk, 0) for pk in ids]), robust=True)
    return deliveries


def _queue(items: list[tuple[int, int]]) -> None:
    for delivery_id, attempt in items:
        send_webhook.delay(delivery_id, attempt)


def send_test_event(endpoint: Endpoint) -> Delivery:
    """A `webhook.test` event to this endpoint only, whatever it subscribes to."""
    with transaction.atomic():
        event = Event.objects.create(
            workspace_id=endpoint.workspace_id, type=EventType.WEBHOOK_TEST,
            data={"endpoint": {"id": endpoint.pk, "url": endpoint.url},
                  "message": "A test event sent from Runcrate; it changes nothing."},
            dedupe_key=f"test:{endpoint.pk}:{new_event_id()}",
        )
        return _deliver(event, [endpoint], manual=True)[0]


def resend(delivery: Delivery) -> Delivery:
    """The same event (same id, same body) to the same endpoint again, as a new delivery."""
    with transaction.atomic():
        return _deliver(delivery.event, [delivery.endpoint], manual=True)[0]


# --- reads ------------------------------------------------------------------------------


def endpoints_of(workspace: Workspace) -> QuerySet[Endpoint]:
    return Endpoint.objects.filter(workspace=workspace).order_by("created_at", "id")


def deliveries_version(endpoint: Endpoint) -> str:
    """Changes whenever the endpoint's delivery log does: a delivery made (a count and the
    newest id) or an attempt finished (every finished attempt adds a row, whatever its outcome)."""
    found = Delivery.objects.filter(endpoint=endpoint).aggregate(count=Count("id"), newest=Max("id"))
    attempts = Attempt.objects.filter(delivery__endpoint=endpoint).count()
    return f"{found['count']}.{found['newest'] or 0}.{attempts}"


def deliveries_of(endpoint: Endpoint) -> QuerySet[Delivery]:
    """The endpoint's deliveries, newest first; `resent`: an earlier delivery of the same event
    went to it (a test event's first delivery is sent by hand, and is no re-send)."""
    earlier = Delivery.objects.filter(event=OuterRef("event"), endpoint=OuterRef("endpoint"), pk__lt=OuterRef("pk"))
    return (Delivery.objects.filter(endpoint=endpoint).select_related("event").annotate(resent=Exists(earlier))
            .prefetch_related("attempt_log").order_by("-created_at", "-id"))
