"""Reads of money shared by the Billing page, the API, the CLI and the MCP server.

Each function returns plain data (dicts, Decimals, datetimes) in the shape the API sends,
in a fixed number of queries whatever the number of clusters or machines.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, overload

from django.db.models import Count, Exists, Q, QuerySet, Sum
from django.db.models.functions import TruncDay
from django.utils import timezone

from accounts.models import Environment, Workspace
from billing.models import LedgerEntry, MachineUsage, UsageMonth
from billing.money import HOURS, hours_lasting, posted_total
from billing.months import month_bounds, month_start, next_month_start
from config.money import to_cents

ZERO = Decimal("0.00")


def credits_received(workspace_id: int) -> QuerySet[LedgerEntry]:
    """The workspace's completed credits (deposits, recharges, positive adjustments): read
    through the partial index that leaves usage out (`ledger_credits_by_date`), so a workspace
    whose balance reached zero after thousands of usage entries is not walked entry by entry."""
    return LedgerEntry.objects.filter(
        workspace_id=workspace_id, amount__gt=0, state=LedgerEntry.State.COMPLETED,
    ).exclude(kind=LedgerEntry.Kind.USAGE)


def balance_summary(workspace: Workspace) -> dict:
    """{credits_balance, active_usage_cost_per_hour, hours_remaining} — GET /api/v1/billing/balance."""
    balance, usage_rate = Workspace.objects.values_list("credit_balance", "usage_rate").get(pk=workspace.pk)
    rate = to_cents(usage_rate)
    return {
        "credits_balance": balance,
        "active_usage_cost_per_hour": rate,
        "hours_remaining": hours_lasting(balance, rate),
    }


def _usage_in_month(workspace_id: int, start: dt.datetime, end: dt.datetime) -> QuerySet[MachineUsage]:
    """Machines with billable time in [start, end): started before its end, and either
    metered past its start or started within it."""
    return MachineUsage.objects.filter(workspace_id=workspace_id, started_at__lt=end).filter(
        Q(billed_until__gt=start) | Q(started_at__gte=start)
    )


def _machine_row(usage: dict, start: dt.datetime, end: dt.datetime, now: dt.datetime) -> dict:
    """One machine's part of a line: what the ledger holds for it in [start, end)."""
    row_start = max(usage["started_at"], start)
    row_until = min(usage["billed_until"], end)
    amount = posted_total(usage["rate"], usage["started_at"], row_until) - posted_total(usage["rate"], usage["started_at"], row_start)
    if usage["ended_at"] is not None and usage["ended_at"] < end:
        row_end = usage["ended_at"]
    elif usage["ended_at"] is None and end > now:
        row_end = None  # still running in the current month
    else:
        row_end = end
    return {
        "node": f"node-{usage['node__index']}",
        "gpu": f"{usage['cluster__machine_type__gpus_per_machine']}x {usage['cluster__machine_type__gpu__slug']}",
        "start": row_start,
        "end": row_end,
        "hours": (Decimal((row_until - row_start).total_seconds()) / HOURS).quantize(Decimal("0.0001")),
        "rate": usage["rate"],
        "amount": amount,
    }


_ROW_FIELDS = (
    "cluster_id", "node__index", "rate", "started_at", "ended_at", "billed_until",
    "cluster__machine_type__gpus_per_machine", "cluster__machine_type__gpu__slug",
)


class UsageLines:
    """A month's "Cluster usage <name>" lines, one per cluster, in the order the clusters were
    created (by id).

    Sliced in the database like a queryset (Paginator, the API's page() and len() work on
    it): a slice costs one grouped query over the month's machines plus one for the slice's
    amounts or machine rows, whatever the number of clusters. No model objects are built and
    no node, log or secret column is read.

    A line is {cluster_id, name, environment_id, description, amount, machines, accruing}.
    Without rows (the Billing page, the API's list) its amount is what the ledger holds for the
    cluster that month. With rows (an opened line, the API's ?rows=true, the CSV) it also has
    rows: [...], and its amount is the sum of its rows. Metering posts exactly the rows'
    amounts, split at month bounds, so the two agree to the cent.
    """

    def __init__(self, workspace: Workspace, year: int, month: int, *, environment: Environment | None = None,
                 with_rows: bool = False) -> None:
        self.start, self.end = month_bounds(year, month)
        self.period = self.start.date()
        self.with_rows = with_rows
        # Paged over clusters, not machines: the slice is taken before anything is summed,
        # so a page of 50 lines sums 50 clusters' machines whatever the workspace runs. Which
        # clusters have a line is the month's UsageMonth rows, read in cluster order from an
        # index that holds that order, so a page stops after its rows and the count reads the
        # index alone, however many clusters the month has.
        months = UsageMonth.objects.filter(period=self.period)
        if environment is not None:
            months = months.filter(environment_id=environment.pk)
        else:
            months = months.filter(workspace_id=workspace.pk)
        self.months = months

    @property
    def lines(self) -> QuerySet[UsageMonth, Any]:
        return self.months.order_by("cluster_id").values("cluster_id", "cluster__name", "environment_id")

    def count(self) -> int:
        return self.months.count()

    def __len__(self) -> int:
        return self.count()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self[0:None])

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if not isinstance(index, slice):
            return self[index:index + 1][0]
        lines: list[dict[str, Any]] = [
            {"id": line["cluster_id"], "name": line["cluster__name"], "environment_id": line["environment_id"]}
            for line in self.lines[index]
        ]
        ids = [line["id"] for line in lines]
        return self._with_rows(lines, ids) if self.with_rows else self._with_amounts(lines, ids)

    def _line(self, line: dict, amount: Decimal) -> dict:
        return {
            "cluster_id": line["id"],
            "name": line["name"],
            "environment_id": line["environment_id"],
            "description": f"Cluster usage {line['name']}",
            "amount": amount,
        }

    def _machines(self, ids: list[int]) -> QuerySet[MachineUsage]:
        """The month's machines of the page's clusters (already this workspace's, and this
        environment's when one is asked for): read through the cluster index alone."""
        return MachineUsage.objects.filter(cluster_id__in=ids, started_at__lt=self.end).filter(
            Q(billed_until__gt=self.start) | Q(started_at__gte=self.start)
        )

    def _with_amounts(self, lines: list[dict], ids: list[int]) -> list[dict]:
        # By the clusters' own index: the ids are this workspace's lines already.
        posted = dict(
            _usage_entries(self.period, cluster_id__in=ids)
            .values_list("cluster_id").annotate(total=Sum("amount")).values_list("cluster_id", "total")
        )
        machines = {
            row["cluster_id"]: row
            for row in self._machines(ids).values("cluster_id")
            .annotate(machines=Count("id"), running=Count("id", filter=Q(ended_at__isnull=True)))
        }
        current = self.end > timezone.now()
        return [
            {**self._line(line, -(posted.get(line["id"]) or ZERO)), "machines": machines[line["id"]]["machines"],
             "accruing": current and machines[line["id"]]["running"] > 0}
            for line in lines
        ]

    def _with_rows(self, lines: list[dict], ids: list[int]) -> list[dict]:
        now = timezone.now()
        rows: dict[int, list[dict]] = defaultdict(list)
        for usage in self._machines(ids).order_by("cluster_id", "node__index", "id").values(*_ROW_FIELDS):
            rows[usage["cluster_id"]].append(_machine_row(usage, self.start, self.end, now))
        return [
            {**self._line(line, sum((row["amount"] for row in rows[line["id"]]), ZERO)), "machines": len(rows[line["id"]]),
             "accruing": any(row["end"] is None for row in rows[line["id"]]), "rows": rows[line["id"]]}
            for line in lines
        ]


def _usage_entries(period: dt.date, **scope: Any) -> QuerySet[LedgerEntry]:
    """The usage the ledger holds for a month, of `scope` (a workspace, or some clusters)."""
    return LedgerEntry.objects.filter(kind=LedgerEntry.Kind.USAGE, state=LedgerEntry.State.COMPLETED, period=period, **scope)


def usage_lines(workspace: Workspace, year: int, month: int, environment: Environment | None = None, *,
                with_rows: bool = False) -> UsageLines:
    """The month's usage lines, to be sliced (paginated) by the caller; see UsageLines."""
    return UsageLines(workspace, year, month, environment=environment, with_rows=with_rows)


def usage_total(workspace: Workspace, year: int, month: int, environment: Environment | None = None) -> Decimal:
    """What the month's usage lines add up to: the usage the ledger holds for the month."""
    entries = _usage_entries(dt.date(year, month, 1), workspace_id=workspace.pk)
    if environment is not None:
        entries = entries.filter(environment_id=environment.pk)
    return -(entries.aggregate(total=Sum("amount"))["total"] or ZERO)


def usage_for_month(
    workspace: Workspace, year: int, month: int, environment: Environment | None = None, cluster_id: int | None = None,
) -> list[dict]:
    """Every line of the month with its machine rows — GET /api/v1/billing/usage?month=YYYY-MM:
    {cluster_id, name, environment, description "Cluster usage <name>", amount, rows: [{node, gpu,
    start, end, hours, rate, amount}]}.

    A row's amount is what the ledger holds for that machine in the month:
    round(rate × (end − started_at)) − round(rate × (start − started_at)), cut at the month's
    bounds and at the metering watermark, exactly as metering posts it. The line's amount is
    the sum of its rows, so the two can never disagree. `end` is None while the machine runs.
    For a page of lines, slice usage_lines(..., with_rows=True) instead.
    """
    lines = usage_lines(workspace, year, month, environment, with_rows=True)
    if cluster_id is not None:
        lines.months = lines.months.filter(cluster_id=cluster_id)
    return list(lines)


def cluster_usage_for_month(workspace: Workspace, cluster_id: int, year: int, month: int,
                            environment: Environment | None = None) -> dict | None:
    """One line opened to its machines (the Billing page's "open a line", GET
    /api/v1/billing/usage/{cluster_id}); None when the cluster had no usage that month."""
    return next(iter(usage_for_month(workspace, year, month, environment, cluster_id=cluster_id)), None)


@dataclass(frozen=True)
class MonthSpend:
    """A month's usage as the Billing page shows it, from one grouped read of its usage
    entries (by environment and day): three reads of them (the total, the environments' share,
    the daily chart) made the page grow with the month's entries (issue 38: 1.5× at 10,000
    clusters)."""

    by_environment: dict[int | None, Decimal]  # None: entries of no environment
    by_day: list[tuple[dt.date, Decimal]]

    @property
    def total(self) -> Decimal:
        return sum(self.by_environment.values(), ZERO)


def month_spend(workspace: Workspace, year: int, month: int) -> MonthSpend:
    start, end = month_bounds(year, month)
    by_environment: defaultdict[int | None, Decimal] = defaultdict(lambda: ZERO)
    per_day: defaultdict[dt.date, Decimal] = defaultdict(lambda: ZERO)
    for environment_id, day, total in (
        _usage_entries(start.date(), workspace_id=workspace.pk)
        .annotate(day=TruncDay("created_at", tzinfo=dt.UTC))
        .values_list("environment_id", "day")
        .annotate(total=Sum("amount"))
        .values_list("environment_id", "day", "total")
    ):
        by_environment[environment_id] += -total
        day_date = day.date() if isinstance(day, dt.datetime) else day
        # A run just after midnight posts the end of the previous day; the month is what counts.
        per_day[min(max(day_date, start.date()), (end - dt.timedelta(days=1)).date())] += -total
    days = (end.date() - start.date()).days
    return MonthSpend(
        by_environment=dict(by_environment),
        by_day=[(start.date() + dt.timedelta(days=i), per_day[start.date() + dt.timedelta(days=i)]) for i in range(days)],
    )


def spend_by_environment(workspace: Workspace, year: int, month: int, spend: MonthSpend | None = None) -> list[dict]:
    """Month-to-date usage per environment against its monthly budget (`spend`: the month's,
    when the caller has read it already)."""
    spent = (spend or month_spend(workspace, year, month)).by_environment
    rows = []
    for env in Environment.objects.filter(workspace_id=workspace.pk):
        amount = spent.get(env.pk) or ZERO
        budget = env.monthly_budget
        rows.append(
            {
                "environment_id": env.pk,
                "name": env.name,
                "spent": amount,
                "budget": budget,
                # What was spent, past 100 % too (a stop lands a little past a budget); the
                # meter is full from 100 %.
                "percent": int(amount / budget * 100) if budget > 0 else 100,
                "reached": amount >= budget,
            }
        )
    return rows


def months_with_activity(workspace: Workspace) -> list[dt.date]:
    """First days of the months that have ledger entries, newest first (the current month always).

    Two index reads whatever the size of the ledger: its first month, then one EXISTS per
    month since (a DISTINCT over the periods would read every entry the workspace ever had).
    """
    entries = LedgerEntry.objects.filter(workspace_id=workspace.pk, period__isnull=False)
    now = timezone.now()
    current = dt.date(now.year, now.month, 1)
    first = entries.order_by("period").values_list("period", flat=True).first()
    periods = {current}
    if first is None:
        return [current]
    periods.add(first)
    candidates = []
    month = first
    while (month := month_start(next_month_start(month))) < current:
        candidates.append(month)
    if candidates:
        probes = {f"m{i}": Exists(entries.filter(period=candidate)) for i, candidate in enumerate(candidates)}
        found = Workspace.objects.filter(pk=workspace.pk).annotate(**probes).values_list(*probes).get()
        periods.update(candidate for candidate, has_entries in zip(candidates, found, strict=True) if has_entries)
    return sorted(periods, reverse=True)
