"""Thin Celery tasks for billing: ids in, reload, call billing.services / billing.payments."""

from __future__ import annotations

from celery import shared_task

from billing import payments


@shared_task(acks_late=True, soft_time_limit=60)
def charge_auto_recharge(workspace_id: int) -> None:
    payments.charge_auto_recharge(workspace_id)

