"""Money enforcement: billing answers who can no longer pay (billing.services), this turns the
answers into terminate_cluster. Driven by beat (clusters.tasks.meter_and_enforce) after each
metering run. Each cluster is stopped on its own: one that fails to stop is logged and tried
again on the next pass, and never keeps the others running.
"""

from __future__ import annotations

import datetime as dt
import logging

from django.conf import settings
from django.utils import timezone

from accounts.models import Environment
from billing import services as billing
from billing.months import month_start
from clusters.models import Cluster, Reason
from clusters.services.terminate import terminate_cluster
from webhooks import events as webhook_events

log = logging.getLogger(__name__)


def _stop(cluster: Cluster, reason: str) -> bool:
    # The owner's "stopped" email comes from terminate_cluster (clusters.emails.notify_terminated).
    try:
        return terminate_cluster(cluster, reason=reason)
    except Exception:
        log.exception("Could not stop cluster %s (%s); the next pass tries again", cluster.pk, reason)
        return False


def stop_exhausted_workspaces() -> list[int]:
    """Terminate every live cluster of a workspace whose balance ran out; returns their ids."""
    live = list(Cluster.objects.terminable().only("id", "workspace_id", "status"))
    exhausted = billing.exhausted_workspace_ids(sorted({c.workspace_id for c in live}))
    return [c.pk for c in live if c.workspace_id in exhausted and _stop(c, Reason.BALANCE_EXHAUSTED)]


def stop_over_budget_environments(at: dt.datetime | None = None) -> list[int]:
    """Terminate the live clusters of environments whose month-to-date spend reached the budget."""
    live = list(Cluster.objects.terminable().only("id", "environment_id", "status"))
    if not live:
        return []
    over = billing.over_budget_environment_ids(sorted({c.environment_id for c in live}), at)
    stopped = [c.pk for c in live if c.environment_id in over and _stop(c, Reason.BUDGET_REACHED)]
    if over:
        _announce_budget_reached(over, live, stopped, at)
    return stopped


def _announce_budget_reached(over: set[int], live: list[Cluster], stopped: list[int], at: dt.datetime | None) -> None:
    """One `budget.reached` webhook per environment and budget a month (webhooks.events)."""
    moment = at or timezone.now()
    spent = billing.month_to_date_spend(sorted(over), moment)
    for environment in Environment.objects.filter(pk__in=over):
        try:
            webhook_events.budget_reached(
                environment.workspace_id, environment.pk, environment.name, environment.monthly_budget,
                spent[environment.pk], month_start(moment).strftime("%Y-%m"),
                [c.pk for c in live if c.environment_id == environment.pk and c.pk in stopped],
            )
        except Exception:
            log.exception("Could not record the budget webhook of environment %s", environment.pk)


def meter_and_enforce(now: dt.datetime | None = None) -> dict:
    """The periodic money pass: billing meters, tops up and warns, then what can no longer be
    paid for is stopped. `next_pass_at`: where an environment reaches its budget before the
    next periodic pass, the instant it does (ISO), for a pass of its own then."""
    result = billing.meter_and_warn(now)
    result["stopped_balance"] = stop_exhausted_workspaces()
    result["stopped_budget"] = stop_over_budget_environments(now)
    moment = now or timezone.now()
    soonest = next_budget_stop(moment)
    result["next_pass_at"] = soonest.isoformat() if soonest is not None else None
    return result


def next_budget_stop(at: dt.datetime) -> dt.datetime | None:
    """The instant an environment with live clusters reaches its monthly budget, when that is
    sooner than the next periodic pass (a stop then lands seconds past the budget instead of up
    to a period past it); None otherwise. Never sooner than a second from `at`."""
    environment_ids = sorted(set(Cluster.objects.terminable().values_list("environment_id", flat=True)))
    if not environment_ids:
        return None
    due = billing.budget_reached_at(environment_ids, at)
    if not due:
        return None
    soonest = min(due.values())
    if soonest >= at + dt.timedelta(seconds=settings.METERING_INTERVAL_SECONDS):
        return None
    return max(soonest, at + dt.timedelta(seconds=1))
