"""Sending one email delivery (notifications.tasks.send_notification): the row locked for the
whole SMTP exchange, retried with backoff while SMTP fails; and the sweep's list of
deliveries whose task was lost. Recording a notification is notifications.services."""

from __future__ import annotations

import datetime as dt
import logging
import smtplib
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from notifications.models import Delivery
from notifications.rendering import build_message

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    status: str  # "sent", "skipped", "retry", "failed"
    retry_in: int | None = None
    error: Exception | None = None


def retry_delay(attempts: int) -> int:
    """Seconds before the next attempt: doubling from the base, capped."""
    return min(settings.NOTIFICATION_RETRY_BASE_SECONDS * 2 ** max(attempts - 1, 0), settings.NOTIFICATION_RETRY_MAX_SECONDS)


def _is_permanent(exc: Exception) -> bool:
    """A 5xx answer about the message or its recipient will not change on retry."""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        return all(code >= 500 for code, _ in exc.recipients.values())
    return isinstance(exc, smtplib.SMTPResponseException) and exc.smtp_code >= 500 and not isinstance(
        exc, smtplib.SMTPServerDisconnected
    )


def send_delivery(delivery_id: int) -> Outcome:
    error: Exception | None = None
    with transaction.atomic():
        # The row stays locked for the whole SMTP exchange: a duplicate task (a broker
        # redelivery, the sweep, a retry racing a late first attempt) waits here and then
        # finds it sent, so one event is one email.
        # No select_related here: PostgreSQL cannot lock the nullable side of an outer join (user).
        delivery = Delivery.objects.select_for_update().filter(pk=delivery_id).first()
        if delivery is None or delivery.status != Delivery.Status.PENDING:
            return Outcome("skipped")
        now = timezone.now()
        try:
            message = build_message(delivery)
        except Exception as exc:  # a template or data bug: retrying renders the same thing
            log.exception("Could not render notification delivery %s", delivery_id)
            _record_failure(delivery, now, exc, final=True)
            return Outcome("failed", error=exc)
        try:
            message.send()
        except OSError as exc:  # smtplib.SMTPException is an OSError, and so is a refused connection
            error = exc
            final = _is_permanent(exc) or delivery.attempts + 1 >= settings.NOTIFICATION_MAX_ATTEMPTS
            _record_failure(delivery, now, exc, final=final)
        else:
            Delivery.objects.filter(pk=delivery.pk).update(
                status=Delivery.Status.SENT, sent_at=now, last_attempt_at=now, attempts=F("attempts") + 1,
                subject=message.subject[:255], next_attempt_at=None,
            )
            return Outcome("sent")
    delivery.refresh_from_db()
    if delivery.status == Delivery.Status.FAILED:
        log.error("Gave up on notification delivery %s after %s attempts: %s", delivery_id, delivery.attempts, error)
        return Outcome("failed", error=error)
    return Outcome("retry", retry_in=retry_delay(delivery.attempts), error=error)


def _record_failure(delivery: Delivery, now: dt.datetime, exc: Exception, *, final: bool) -> None:
    attempts = delivery.attempts + 1
    Delivery.objects.filter(pk=delivery.pk).update(
        attempts=attempts, last_attempt_at=now, last_error=f"{type(exc).__name__}: {exc}"[:2000],
        status=Delivery.Status.FAILED if final else Delivery.Status.PENDING,
        next_attempt_at=None if final else now + dt.timedelta(seconds=retry_delay(attempts)),
    )


def pending_to_requeue(now: dt.datetime | None = None) -> list[int]:
    """Pending deliveries whose task was lost (a broker outage at commit, a dead worker):
    never tried and older than the grace period, or well past their retry time."""
    now = now or timezone.now()
    grace = dt.timedelta(seconds=settings.NOTIFICATION_REQUEUE_AFTER_SECONDS)
    return list(
        Delivery.objects.filter(status=Delivery.Status.PENDING)
        .filter(Q(next_attempt_at__isnull=True, created_at__lt=now - grace) | Q(next_attempt_at__lt=now - grace))
        .values_list("pk", flat=True)[:500]
    )
