"""Beat tasks of the fleet's hosts."""

from __future__ import annotations

from celery import shared_task

from offers import fleet


@shared_task(soft_time_limit=1800, time_limit=1860)
def watch_hosts() -> dict[str, str]:
    """Beat, every HOST_WATCH_SECONDS: grade hosts again that are due (daily, or after their
    runtime or GPU driver changed); one whose grade fell drains and the operators are told."""
    return fleet.watch_hosts()
