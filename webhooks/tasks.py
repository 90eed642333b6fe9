"""Thin Celery tasks: a delivery id and attempt number in, one attempt out; the beat sweep
queues retries that have come due (the database, not Celery's countdown, holds the schedule,
so a retry three days out survives worker restarts)."""

from __future__ import annotations

from celery import shared_task

from webhooks import sending


@shared_task(acks_late=True, soft_time_limit=60, time_limit=90)
def send_webhook(delivery_id: int, attempt: int) -> str:
    return sending.send_delivery(delivery_id, attempt).status


@shared_task(soft_time_limit=60)
def send_due_webhooks() -> int:
    claimed = sending.claim_due()
    for delivery_id, attempt in claimed:
        send_webhook.delay(delivery_id, attempt)
    return len(claimed)
