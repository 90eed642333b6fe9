"""Thin Celery tasks: a delivery id in, send it once, retry with backoff while SMTP fails."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from notifications import sending


@shared_task(bind=True, acks_late=True, max_retries=None, soft_time_limit=60, time_limit=90)
def send_notification(self: Any, delivery_id: int) -> str:
    # The attempt count lives on the Delivery row (it survives a re-queue by the sweep),
    # so the database, not Celery's retry counter, decides when to give up.
    outcome = sending.send_delivery(delivery_id)
    if outcome.status == "retry":
        raise self.retry(exc=outcome.error, countdown=outcome.retry_in)
    return outcome.status


@shared_task(soft_time_limit=60)
def send_pending_notifications() -> int:
    """Re-queue deliveries whose task was lost; sending stays once-only under the row lock."""
    ids = sending.pending_to_requeue()
    for delivery_id in ids:
        send_notification.delay(delivery_id)
    return len(ids)
