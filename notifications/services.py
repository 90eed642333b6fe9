"""The one way to send an email to a customer or to sales.

    notify(Kind.TOPUP_RECEIVED, user_ids=[...], context={...}, dedupe_key="topup:cs_123")

records the event (once: a second call with the same dedupe_key does nothing), decides who
gets it (users who turned an optional kind off are skipped), and after commit queues one
Celery task per recipient, which sends it and retries with backoff while SMTP fails.
See docs/notifications.md."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction

from notifications.kinds import CRITICAL_KINDS, OPTIONAL_KINDS, SPECS
from notifications.models import Delivery, Notification, NotificationPreference
from notifications.tasks import send_notification

log = logging.getLogger(__name__)


def notify(
    kind: str, *, user_ids: Iterable[int] = (), recipients: Iterable[str] = (), context: dict | None = None,
    dedupe_key: str, reply_to: Iterable[str] = (), workspace_id: int | None = None,
) -> Notification | None:
    """Record one notification and queue its emails after commit. Returns None when this
    dedupe_key was already recorded (a duplicate trigger), so the event is emailed once.

    `user_ids` get it unless they turned an optional kind off; `recipients` are plain
    addresses (sales, a quote requester) that always get it. `context` must be JSON-safe
    (ids, strings, numbers); the kind's context builder turns it into template context
    when the email is sent. Call it inside the transaction that makes the change, so the
    record commits, or rolls back, with the event."""
    if kind not in SPECS:
        raise ValueError(f"Unknown notification kind {kind!r}")
    try:
        # A savepoint, so a duplicate leaves the caller's transaction usable.
        with transaction.atomic():
            notification = Notification.objects.create(
                kind=kind, dedupe_key=dedupe_key, context=context or {}, reply_to=list(reply_to), workspace_id=workspace_id,
            )
    except IntegrityError:
        if Notification.objects.filter(dedupe_key=dedupe_key).exists():
            return None
        raise
    muted = _muted_user_ids(kind, user_ids)
    addresses: dict[str, tuple[int | None, str]] = {}
    for user_id, email in get_user_model().objects.filter(pk__in=list(user_ids)).exclude(email="").values_list("pk", "email"):
        addresses.setdefault(email.lower(), (user_id, Delivery.Status.MUTED if user_id in muted else Delivery.Status.PENDING))
    for email in recipients:
        if email:
            addresses[email.lower()] = (None, Delivery.Status.PENDING)
    deliveries = Delivery.objects.bulk_create(
        [Delivery(notification=notification, user_id=uid, email=email, status=status)
         for email, (uid, status) in addresses.items()]
    )
    pending = [d.pk for d in deliveries if d.status == Delivery.Status.PENDING]
    if pending:
        # robust: a broker hiccup must not turn the committed change into an error for the
        # caller; the sweep (send_pending_notifications) re-queues anything left pending.
        # (A closure, not functools.partial: Django names the callback by __qualname__ when logging.)
        transaction.on_commit(lambda: _queue(pending), robust=True)
    return notification


def _queue(delivery_ids: list[int]) -> None:
    for delivery_id in delivery_ids:
        send_notification.delay(delivery_id)


def _muted_user_ids(kind: str, user_ids: Iterable[int]) -> set[int]:
    if kind in CRITICAL_KINDS:
        return set()
    return set(
        NotificationPreference.objects.filter(user_id__in=list(user_ids), kind=kind, enabled=False).values_list("user_id", flat=True)
    )


# --- who gets what ----------------------------------------------------------------------


def billing_contact_ids(workspace_id: int) -> list[int]:
    """Owners and Managers: the members who see billing (accounts.models.BILLING_ROLES)."""
    from accounts.models import billing_contact_ids

    return billing_contact_ids(workspace_id)


# --- preferences ------------------------------------------------------------------------


def enabled_kinds(user: User) -> set[str]:
    off = set(NotificationPreference.objects.filter(user=user, enabled=False).values_list("kind", flat=True))
    return {kind for kind in OPTIONAL_KINDS if kind not in off}


def set_preferences(user: User, enabled: Iterable[str]) -> None:
    """Turn the optional kinds in `enabled` on and every other optional kind off."""
    enabled = set(enabled)
    with transaction.atomic():
        for kind in OPTIONAL_KINDS:
            NotificationPreference.objects.update_or_create(user=user, kind=kind, defaults={"enabled": kind in enabled})
