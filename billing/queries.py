"""Reads of money shared by the Billing page, the API, the CLI and the MCP server.

Each function returns plain data (dicts, Decimals, datetimes) in the shape the API sends,
in a fixed number of queries whatever the number of clusters or machines.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal

from django.db.models import Q, Sum
from django.db.models.functions import TruncDay
from django.utils import timezone

from accounts.models import Environment, Workspace
from billing.models import LedgerEntry, MachineUsage
from billing.services import HOURS, posted_total, to_cents

ZERO = Decimal("0.00")


def month_bounds(year: int, month: int) -> tuple[dt.datetime, dt.datetime]:
    """[first instant, first instant of the next month) in UTC."""
    start = dt.datetime(year, month, 1, tzinfo=dt.timezone.utc)
    end = dt.datetime(year + (month == 12), month % 12 + 1, 1, tzinfo=dt.timezone.utc)
    return start, end


def burn_rate(workspace: Workspace | int) -> Decimal:
    """Spend per hour now: the hourly price of every machine being billed."""
    workspace_id = getattr(workspace, "pk", workspace)
    total = MachineUsage.objects.filter(workspace_id=workspace_id, ended_at__isnull=True).aggregate(s=Sum("rate"))["s"]
    return total or ZERO


def hours_remaining(balance: Decimal, rate: Decimal) -> Decimal | None:
    """Hours the balance lasts at `rate`; None when nothing is billed (it lasts forever)."""
    if rate <= 0:
        return None
    return max(balance / rate, Decimal(0)).quantize(Decimal("0.01"))


def balance_summary(workspace: Workspace) -> dict:
    """{credits_balance, active_usage_cost_per_hour, hours_remaining} — GET /api/v1/billing/balance."""
    balance = Workspace.objects.values_list("credit_balance", flat=True).get(pk=workspace.pk)
    rate = to_cents(burn_rate(workspace))
    return {
        "credits_balance": balance,
        "active_usage_cost_per_hour": rate,
        "hours_remaining": hours_remaining(balance, rate),
    }


def _gpu_label(machine_type) -> str:
    return f"{machine_type.gpus_per_machine}x {machine_type.gpu.slug}"


def usage_for_month(
    workspace: Workspace, year: int, month: int, environment: Environment | None = None, cluster_id: int | None = None,
) -> list[dict]:
    """One item per cluster billed in the month — GET /api/v1/billing/usage?month=YYYY-MM:
    {cluster_id, name, environment, description "Cluster usage <name>", amount, rows: [{node, gpu,
    start, end, hours, rate, amount}]}.

    A row's amount is what the ledger holds for that machine in the month:
    round(rate × (end − started_at)) − round(rate × (start − started_at)), cut at the month's
    bounds and at the metering watermark, exactly as metering posts it. The line's amount is
    the sum of its rows, so the two can never disagree. `end` is None while the machine runs.
    """
    start, end = month_bounds(year, month)
    usages = (
        MachineUsage.objects.filter(workspace_id=workspace.pk, started_at__lt=end)
        .filter(Q(billed_until__gt=start) | Q(started_at__gte=start))
        .select_related("node", "cluster", "cluster__machine_type__gpu")
        .order_by("cluster__created_at", "cluster_id", "node__index")
    )
    if environment is not None:
        usages = usages.filter(environment_id=environment.pk)
    if cluster_id is not None:
        usages = usages.filter(cluster_id=cluster_id)
    items: dict[int, dict] = {}
    for usage in usages:
        row_start = max(usage.started_at, start)
        row_until = min(usage.billed_until, end)
        amount = posted_total(usage.rate, usage.started_at, row_until) - posted_total(usage.rate, usage.started_at, row_start)
        if usage.ended_at is not None and usage.ended_at < end:
            row_end = usage.ended_at
        elif usage.ended_at is None and end > timezone.now():
            row_end = None  # still running in the current month
        else:
            row_end = end
        cluster = usage.cluster
        item = items.setdefault(
            cluster.pk,
            {
                "cluster_id": cluster.pk,
                "name": cluster.name,
                "environment_id": cluster.environment_id,
                "description": f"Cluster usage {cluster.name}",
                "amount": ZERO,
                "rows": [],
            },
        )
        item["rows"].append(
            {
                "node": usage.node.name,
                "gpu": _gpu_label(cluster.machine_type),
                "start": row_start,
                "end": row_end,
                "hours": (Decimal((row_until - row_start).total_seconds()) / HOURS).quantize(Decimal("0.0001")),
                "rate": usage.rate,
                "amount": amount,
            }
        )
        item["amount"] += amount
    return list(items.values())


def cluster_usage_for_month(workspace: Workspace, cluster_id: int, year: int, month: int) -> dict | None:
    return next(iter(usage_for_month(workspace, year, month, cluster_id=cluster_id)), None)


def spend_by_environment(workspace: Workspace, year: int, month: int) -> list[dict]:
    """Month-to-date usage per environment against its monthly budget."""
    period = dt.date(year, month, 1)
    spent = dict(
        LedgerEntry.objects.filter(
            workspace_id=workspace.pk, kind=LedgerEntry.Kind.USAGE, state=LedgerEntry.State.COMPLETED, period=period
        )
        .values_list("environment_id")
        .annotate(total=Sum("amount"))
        .values_list("environment_id", "total")
    )
    rows = []
    for env in Environment.objects.filter(workspace_id=workspace.pk):
        amount = -(spent.get(env.pk) or ZERO)
        budget = env.monthly_budget
        rows.append(
            {
                "environment_id": env.pk,
                "name": env.name,
                "spent": amount,
                "budget": budget,
                "percent": int(min(amount / budget * 100, Decimal(100))) if budget > 0 else 100,
                "reached": amount >= budget,
            }
        )
    return rows


def daily_spend(workspace: Workspace, year: int, month: int) -> list[tuple[dt.date, Decimal]]:
    """Usage posted per day of the month (UTC), every day present, for the spend chart."""
    start, end = month_bounds(year, month)
    per_day = defaultdict(lambda: ZERO)
    for day, total in (
        LedgerEntry.objects.filter(
            workspace_id=workspace.pk, kind=LedgerEntry.Kind.USAGE, state=LedgerEntry.State.COMPLETED,
            period=start.date(),
        )
        .annotate(day=TruncDay("created_at", tzinfo=dt.timezone.utc))
        .values_list("day")
        .annotate(total=Sum("amount"))
        .values_list("day", "total")
    ):
        day_date = day.date() if isinstance(day, dt.datetime) else day
        # A run just after midnight posts the end of the previous day; the month is what counts.
        per_day[min(max(day_date, start.date()), (end - dt.timedelta(days=1)).date())] += -total
    days = (end.date() - start.date()).days
    return [(start.date() + dt.timedelta(days=i), per_day[start.date() + dt.timedelta(days=i)]) for i in range(days)]


def months_with_activity(workspace: Workspace) -> list[dt.date]:
    """First days of the months that have ledger entries, newest first (the current month always)."""
    periods = set(
        LedgerEntry.objects.filter(workspace_id=workspace.pk, period__isnull=False).values_list("period", flat=True).distinct()
    )
    now = timezone.now()
    periods.add(dt.date(now.year, now.month, 1))
    return sorted(periods, reverse=True)
