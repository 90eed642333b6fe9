"""Thin Celery tasks for billing: ids in, reload, call billing.services / billing.payments."""

from __future__ import annotations

from celery import shared_task


@shared_task(acks_late=True, soft_time_limit=120, time_limit=150)
def meter_and_enforce() -> dict:
    """The periodic pass (beat, every METERING_INTERVAL_SECONDS): meter, recharge, warn, stop."""
    from billing import services

    return services.meter_and_enforce()


@shared_task(acks_late=True, soft_time_limit=60)
def charge_auto_recharge(workspace_id: int) -> None:
    from billing import payments

    payments.charge_auto_recharge(workspace_id)

