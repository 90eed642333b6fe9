"""Every change to money: ledger entries, usage intervals, metering and enforcement.

Money is an append-only ledger with a cached balance on the workspace that changes only in
the same transaction as its entry, under a row lock on the workspace. Usage accrues per
machine with a `billed_until` watermark (see MachineUsage).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q, QuerySet, Sum, Value
from django.db.models.functions import Greatest
from django.utils import timezone

from accounts.models import Environment, Workspace
from audit.recording import record
from billing.ledger import post_entry
from billing.models import AutoRecharge, BillingNotice, LedgerEntry, MachineUsage, UsageMonth
from billing.money import posted_total
from billing.months import month_start, next_month_start
from config.bulk import update_rows
from config.errors import PaymentRequired
from config.money import CENT, format_money, to_cents
from webhooks import events as webhook_events

if TYPE_CHECKING:
    from clusters.models import Cluster, Node

log = logging.getLogger(__name__)

# A warning email goes once each time the hours left at the current spend fall under one of these.
BALANCE_WARNING_HOURS = (24, 1)
# Without a top-up, a balance warning that stopped applying warns again at the next crossing
# only this long after it was sent (_rearm_balance_warnings).
BALANCE_WARNING_REARM = dt.timedelta(hours=24)


class BudgetReached(PaymentRequired):
    pass


def budget_remaining(monthly_budget: Decimal, spent: Decimal) -> Decimal:
    """What is left of an environment's monthly budget (never below zero): the plan, the
    create page, the API's balance and environments all read it from here."""
    return max(monthly_budget - spent, Decimal("0.00"))


def machines_cost(usages: Iterable[MachineUsage], now: dt.datetime) -> Decimal:
    """What machines cost from their start to their end (or `now`), as the ledger posts it and
    the Billing line, its CSV and the API sum it: each machine's running total rounded to cents,
    then added up. Never the exact sum rounded once: two machines at $2.315 each are $4.64 on
    the ledger and would read $4.63. Every page that shows a cluster's cost uses this."""
    return sum((posted_total(u.rate, u.started_at, u.ended_at or now) for u in usages), Decimal("0.00"))


def required_balance(price_per_hour: Decimal) -> Decimal:
    """To start (or grow) a cluster the balance must cover one hour of it, never less than $10."""
    return max(to_cents(price_per_hour), settings.MINIMUM_CREATE_BALANCE)


def adjust_balance(*, workspace_id: int, amount: Decimal, reason: str, actor: str) -> LedgerEntry:
    """An operator's credit (positive) or correction (negative): one ledger entry that moves
    the balance like any other, saying who made it and why."""
    import uuid

    amount = to_cents(Decimal(amount))
    if amount == 0:
        raise ValueError("An adjustment moves the balance: enter an amount other than 0.")
    reason = (reason or "").strip() or "Balance adjustment"
    with transaction.atomic():
        entry, _ = post_entry(
            workspace_id=workspace_id, kind=LedgerEntry.Kind.ADJUSTMENT, amount=amount,
            idempotency_key=f"adjustment:{uuid.uuid4()}", description=f"{reason} (by {actor})"[:255],
        )
        record(workspace_id, "billing.adjustment", entry, label=reason[:200], after={"amount": amount})
    log.info("Balance adjustment of %s on workspace %s by %s: %s", amount, workspace_id, actor, reason)
    return entry


# --- usage intervals ----------------------------------------------------------------------


def start_usage(cluster: Cluster, nodes: Iterable[Node], at: dt.datetime) -> None:
    """Open one usage interval per machine, all from `at` (the instant the last one joined,
    or, for a worker added later, the instant it was up)."""
    with transaction.atomic():
        MachineUsage.objects.bulk_create(
            [
                MachineUsage(
                    node=node, cluster=cluster, workspace_id=cluster.workspace_id,
                    environment_id=cluster.environment_id, rate=cluster.price_per_machine_hour,
                    started_at=at, billed_until=at,
                )
                for node in nodes
            ],
            ignore_conflicts=True,
        )
        record_usage_months([(cluster.pk, cluster.workspace_id, cluster.environment_id, month_start(at))])
        refresh_usage_rate(cluster.workspace_id)


def record_usage_months(months: Iterable[tuple[int, int, int, dt.date]]) -> None:
    """Note that these clusters had billable time in these months ((cluster, workspace,
    environment, period)); a month already noted stays as it is."""
    UsageMonth.objects.bulk_create(
        [UsageMonth(cluster_id=c, workspace_id=w, environment_id=e, period=p) for c, w, e, p in dict.fromkeys(months)],
        ignore_conflicts=True,
    )


def end_usage(cluster: Cluster, at: dt.datetime) -> None:
    # A metering run that read the clock just before this terminate may already have billed
    # a few seconds past `at`; the interval then ends at its watermark so the posted amount
    # always equals the interval's rounded total.
    with transaction.atomic():
        MachineUsage.objects.filter(cluster=cluster, ended_at__isnull=True).update(
            ended_at=Greatest(Value(at), F("billed_until"))
        )
        refresh_usage_rate(cluster.workspace_id)


def end_node_usage(node_ids: Iterable[int], at: dt.datetime) -> None:
    """End the intervals of some machines of a cluster (a replaced machine, or one that was
    swapped in and did not take over), as end_usage does for a whole cluster."""
    usages = MachineUsage.objects.filter(node_id__in=list(node_ids))
    with transaction.atomic():
        workspace_ids = sorted(set(usages.values_list("workspace_id", flat=True)))
        usages.filter(ended_at__isnull=True).update(ended_at=Greatest(Value(at), F("billed_until")))
        for workspace_id in workspace_ids:
            refresh_usage_rate(workspace_id)


def refresh_usage_rate(workspace_id: int) -> Decimal:
    """Recount the workspace's burn rate (Workspace.usage_rate) from its open intervals, in the
    caller's transaction; returns it.

    A recount rather than an increment, so it is right whatever the caller changed (rows
    skipped as conflicts, intervals already ended). The workspace row is locked first and the
    SUM read after the lock is granted: a concurrent opener or closer of the same workspace
    commits before this statement reads, so its rows are counted and neither overwrites the
    other with a stale sum. The lock is taken after the usage rows, in the order metering
    takes them (usage rows, then workspaces), so the two never wait on each other in a cycle.
    """
    with transaction.atomic():
        list(Workspace.objects.select_for_update().filter(pk=workspace_id).values_list("pk"))
        total = MachineUsage.objects.filter(workspace_id=workspace_id, ended_at__isnull=True).aggregate(s=Sum("rate"))["s"]
        # SQLite sums decimals in floating point: four places are what the rates carry.
        rate = Decimal(total or 0).quantize(Decimal("0.0001"))
        Workspace.objects.filter(pk=workspace_id).update(usage_rate=rate)
    return rate


# --- metering ---------------------------------------------------------------------------------


@dataclass
class MeteringRun:
    now: dt.datetime
    machines: int = 0
    entries: int = 0
    posted: Decimal = Decimal("0.00")


def _due_usages(now: dt.datetime, cluster_id: int | None) -> QuerySet[MachineUsage]:
    queryset = (
        MachineUsage.objects
        # SKIP LOCKED: rows a concurrent run holds are its to post; this run takes the rest
        # and never waits, so ten runs at once post each machine's accrual exactly once.
        .select_for_update(skip_locked=True, of=("self",))
        .filter(Q(ended_at__isnull=True, billed_until__lt=now) | Q(ended_at__isnull=False, billed_until__lt=F("ended_at")))
        .select_related("cluster")
        .only(
            "id", "cluster_id", "workspace_id", "environment_id", "rate", "started_at", "ended_at", "billed_until",
            "posted_amount", "cluster__name",
        )
        .order_by("id")
    )
    if cluster_id is not None:
        queryset = queryset.filter(cluster_id=cluster_id)
    return queryset


def _save_watermarks(usages: list[MachineUsage]) -> None:
    # One statement for any number of machines; the rows are locked by the metering SELECT.
    update_rows(MachineUsage, usages, ["billed_until", "posted_amount"], locked=True)


def _debit_workspaces(debits: dict[int, Decimal], balances: dict[int, Decimal]) -> None:
    ids = sorted(debits)
    if connection.vendor == "postgresql":
        table = Workspace._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} AS w SET credit_balance = w.credit_balance - v.debit "
                "FROM (SELECT unnest(%s::bigint[]) AS id, unnest(%s::numeric[]) AS debit) AS v WHERE w.id = v.id",
                [ids, [debits[i] for i in ids]],
            )
    else:
        # SQLite does decimal arithmetic in floating point (10.00 − 9.84 − 0.16 ≠ 0 there), so
        # write the balances computed in Decimal under the lock instead of an expression.
        for workspace_id in ids:
            Workspace.objects.filter(pk=workspace_id).update(credit_balance=balances[workspace_id])


def meter_usage(now: dt.datetime | None = None, *, cluster_id: int | None = None) -> MeteringRun:
    """Post what every machine accrued since its watermark, in one transaction.

    Per machine: total = round(rate × (until − started_at) / 3600, 2), due = total − posted,
    split at month boundaries so each month's spend is its own. Dues are summed into one
    ledger entry per cluster and month. The number of queries does not depend on the number
    of machines: one locking SELECT, one lock on the workspaces, one INSERT of the entries,
    one UPDATE of the watermarks and one UPDATE of the balances.
    """
    now = now or timezone.now()
    run = MeteringRun(now=now)
    with transaction.atomic():
        usages = list(_due_usages(now, cluster_id))
        if not usages:
            return run
        # (workspace, cluster, environment, period) -> amount, in first-seen order.
        dues: dict[tuple[int, int, int, dt.date], Decimal] = {}
        first_usage: dict[tuple[int, int, int, dt.date], int] = {}
        names: dict[int, str] = {}
        for usage in usages:
            until = min(now, usage.ended_at) if usage.ended_at else now
            moment, posted = usage.billed_until, usage.posted_amount
            while moment < until:
                segment_end = min(until, next_month_start(moment))
                total = posted_total(usage.rate, usage.started_at, segment_end)
                key = (usage.workspace_id, usage.cluster_id, usage.environment_id, month_start(moment))
                dues[key] = dues.get(key, Decimal("0.00")) + (total - posted)
                first_usage.setdefault(key, usage.pk)
                moment, posted = segment_end, total
            usage.billed_until, usage.posted_amount = max(until, usage.billed_until), posted
            names[usage.cluster_id] = usage.cluster.name
        run.machines = len(usages)

        debits: dict[int, Decimal] = defaultdict(lambda: Decimal("0.00"))
        for (workspace_id, _, _, _), amount in dues.items():
            debits[workspace_id] += amount
        debits = {ws: amount for ws, amount in debits.items() if amount}
        # Lock the workspaces (in id order, as every other balance change does) so the
        # running balance written on each entry is the true one.
        balances = dict(
            Workspace.objects.select_for_update().filter(pk__in=sorted(debits)).order_by("pk").values_list("pk", "credit_balance")
        )
        entries = []
        for (workspace_id, cid, environment_id, period), amount in dues.items():
            if not amount:
                continue
            balances[workspace_id] -= amount
            entries.append(
                LedgerEntry(
                    workspace_id=workspace_id, cluster_id=cid, environment_id=environment_id,
                    kind=LedgerEntry.Kind.USAGE, state=LedgerEntry.State.COMPLETED, amount=-amount,
                    balance_after=balances[workspace_id], period=period,
                    description=f"Cluster usage {names[cid]}",
                    idempotency_key=f"usage:{cid}:{period:%Y-%m}:{now.isoformat()}:{first_usage[(workspace_id, cid, environment_id, period)]}",
                )
            )
            run.posted += amount
        if entries:
            LedgerEntry.objects.bulk_create(entries)
            _debit_workspaces(debits, balances)
        _save_watermarks(usages)
        # Every month a watermark moved into has the cluster's line, even before it holds a cent.
        record_usage_months((cid, workspace_id, environment_id, period) for workspace_id, cid, environment_id, period in dues)
        run.entries = len(entries)
    return run


def meter_cluster(cluster_id: int, now: dt.datetime | None = None) -> Decimal:
    """Post what one cluster's machines accrued (called when it terminates); returns the amount."""
    return meter_usage(now, cluster_id=cluster_id).posted


# --- budgets and balance checks --------------------------------------------------------------


def month_to_date_spend(environment_ids: list[int], at: dt.datetime | None = None) -> dict[int, Decimal]:
    at = at or timezone.now()
    rows = (
        LedgerEntry.objects.filter(
            environment_id__in=environment_ids, kind=LedgerEntry.Kind.USAGE, state=LedgerEntry.State.COMPLETED,
            period=month_start(at),
        )
        .values_list("environment_id")
        .annotate(total=Sum("amount"))
        .values_list("environment_id", "total")
    )
    spent = {env_id: Decimal("0.00") for env_id in environment_ids}
    spent.update({env_id: -total for env_id, total in rows})
    return spent


def check_budget(environment: Environment, at: dt.datetime | None = None) -> None:
    """Refuse to start anything in an environment that has reached its monthly budget."""
    spent = month_to_date_spend([environment.pk], at)[environment.pk]
    if spent >= environment.monthly_budget:
        raise BudgetReached(
            "budget_reached",
            f"The environment {environment.name!r} has spent {format_money(spent)} this month, reaching its monthly budget "
            f"of {format_money(environment.monthly_budget)}. Raise the budget or wait for next month.",
            field="__all__",
            details={"spent": str(spent), "budget": str(environment.monthly_budget)},
        )


# --- answers for enforcement (clusters.enforcement acts on them) ---------------------------


def exhausted_workspace_ids(workspace_ids: list[int] | None = None) -> set[int]:
    """Workspaces whose balance has run out (of `workspace_ids`, or of all)."""
    workspaces = Workspace.objects.filter(credit_balance__lte=0)
    if workspace_ids is not None:
        workspaces = workspaces.filter(pk__in=workspace_ids)
    return set(workspaces.values_list("pk", flat=True))


def budget_reached_at(environment_ids: list[int], at: dt.datetime) -> dict[int, dt.datetime]:
    """When each of these environments' month-to-date spend (posted up to `at`) reaches its
    monthly budget at the rate its running machines cost now; only environments with running
    machines that are still under their budget."""
    rates = dict(
        MachineUsage.objects.filter(environment_id__in=environment_ids, ended_at__isnull=True)
        .values_list("environment_id").annotate(rate=Sum("rate")).values_list("environment_id", "rate")
    )
    rates = {env_id: rate for env_id, rate in rates.items() if rate}
    if not rates:
        return {}
    spent = month_to_date_spend(list(rates), at)
    budgets = dict(Environment.objects.filter(pk__in=list(rates)).values_list("pk", "monthly_budget"))
    return {
        env_id: at + dt.timedelta(hours=float((budgets[env_id] - spent[env_id]) / rate))
        for env_id, rate in rates.items() if spent[env_id] < budgets[env_id]
    }


def over_budget_environment_ids(environment_ids: list[int], at: dt.datetime | None = None) -> set[int]:
    """Environments (of `environment_ids`) whose month-to-date spend has reached their monthly budget."""
    spent = month_to_date_spend(environment_ids, at)
    budgets = dict(Environment.objects.filter(pk__in=environment_ids).values_list("pk", "monthly_budget"))
    return {env_id for env_id, budget in budgets.items() if spent[env_id] >= budget}


def warn_low_balances() -> list[str]:
    """Email (and webhook) once per threshold crossing when few hours are left at the current spend."""
    from billing import emails

    rates = dict(
        MachineUsage.objects.filter(ended_at__isnull=True).values_list("workspace_id").annotate(rate=Sum("rate"))
        .values_list("workspace_id", "rate")
    )
    check_usage_rates(rates)
    balances = dict(Workspace.objects.filter(pk__in=list(rates)).values_list("pk", "credit_balance"))
    now = timezone.now()
    topped_up = _balances_after_last_top_up(list(rates), now - BALANCE_WARNING_REARM)
    low: dict[str, tuple[int, int, Decimal, Decimal]] = {}
    for workspace_id, rate in rates.items():
        if not rate:
            continue
        hours_left = max(balances[workspace_id], Decimal(0)) / rate
        # A top-up the customer just made, knowing its runway, is no crossing: a threshold the
        # balance was already under right after it warns at the next one only.
        after_top_up = topped_up.get(workspace_id)
        for threshold in BALANCE_WARNING_HOURS:
            if after_top_up is not None and after_top_up / rate < threshold:
                continue
            if hours_left < threshold:
                low[f"balance_low:{workspace_id}:{threshold}h"] = (workspace_id, threshold, hours_left, rate)
    _rearm_balance_warnings(set(low), now)
    sent = []
    open_keys = set(
        BillingNotice.objects.filter(key__in=list(low), cleared_at__isnull=True).values_list("key", flat=True)
    )
    for key, (workspace_id, threshold, hours_left, rate) in low.items():
        if key in open_keys:
            continue
        try:
            with transaction.atomic():
                notice = BillingNotice.objects.create(
                    workspace_id=workspace_id, kind=BillingNotice.Kind.BALANCE_LOW, key=key,
                    context={"threshold_hours": threshold, "hours_left": str(hours_left.quantize(CENT)),
                             "rate": str(to_cents(rate)), "balance": str(balances[workspace_id])},
                )
                emails.queue_notice(notice.pk)
                webhook_events.balance_low(workspace_id, notice.context, key=f"billing-notice:{notice.pk}")
        except IntegrityError:
            continue  # a concurrent sweep claimed this warning
        sent.append(key)
    return sent


def _balances_after_last_top_up(workspace_ids: list[int], since: dt.datetime) -> dict[int, Decimal]:
    """Each workspace's balance right after its latest credit (a top-up, an auto-recharge, a
    credit adjustment) since `since`, for those that had one."""
    # Newest first, the first per workspace kept here rather than with DISTINCT ON, which only
    # PostgreSQL has (make run keeps its data in SQLite); a day's credits are few rows.
    credits = (
        LedgerEntry.objects.filter(workspace_id__in=workspace_ids, amount__gt=0, created_at__gte=since,
                                   state=LedgerEntry.State.COMPLETED, balance_after__isnull=False)
        .exclude(kind=LedgerEntry.Kind.USAGE)
        .order_by("workspace_id", "-created_at", "-id")
        .values_list("workspace_id", "balance_after")
    )
    latest: dict[int, Decimal] = {}
    for workspace_id, balance in credits:
        if balance is not None:
            latest.setdefault(workspace_id, balance)
    return latest


def _rearm_balance_warnings(low_keys: set[str], now: dt.datetime) -> None:
    """Clear the open balance warnings that no longer apply, so the next crossing warns again;
    but only once money came in (the balance is above what the warning said) or a day after
    the warning. What runs changes the hours left without a cent coming in: a cluster ended
    and another started minutes later once cleared the warning and sent it again."""
    stale = BillingNotice.objects.filter(kind=BillingNotice.Kind.BALANCE_LOW, cleared_at__isnull=True).exclude(
        key__in=list(low_keys)
    )
    notices = list(stale.values_list("pk", "workspace_id", "created_at", "context"))
    balances = dict(Workspace.objects.filter(pk__in={w for _, w, _, _ in notices}).values_list("pk", "credit_balance"))
    rearmed = [
        pk for pk, workspace_id, created_at, context in notices
        if created_at <= now - BALANCE_WARNING_REARM
        or balances.get(workspace_id, Decimal(0)) > Decimal(context.get("balance") or "0")
    ]
    if rearmed:
        BillingNotice.objects.filter(pk__in=rearmed, cleared_at__isnull=True).update(cleared_at=now)


def check_usage_rates(measured: dict[int, Decimal]) -> list[int]:
    """Hold every workspace's kept burn rate to the SUM of its open intervals (`measured`,
    workspace id -> rate, read by the caller): where they differ, recount under the lock
    (the SUM may also have moved since it was read) and log the drift if the recount confirms
    it. Returns the ids of the workspaces whose rate was corrected."""
    kept = dict(
        Workspace.objects.filter(Q(pk__in=list(measured)) | ~Q(usage_rate=0)).values_list("pk", "usage_rate")
    )
    corrected = []
    for workspace_id in sorted(set(kept) | set(measured)):
        expected = Decimal(measured.get(workspace_id) or 0).quantize(Decimal("0.0001"))
        if kept.get(workspace_id) == expected:
            continue
        rate = refresh_usage_rate(workspace_id)
        if rate != kept.get(workspace_id):
            log.error("Workspace %s kept a burn rate of %s/h against %s/h of open usage: corrected.",
                      workspace_id, kept.get(workspace_id), rate)
            corrected.append(workspace_id)
    return corrected


def trigger_auto_recharges() -> list[int]:
    """Queue one off-session charge per workspace whose balance is under its threshold."""
    from billing import tasks

    candidates = AutoRecharge.objects.filter(
        enabled=True, armed=True, workspace__credit_balance__lt=F("threshold")
    ).exclude(stripe_payment_method_id="").values_list("pk", "workspace_id")
    queued = []
    for pk, workspace_id in candidates:
        with transaction.atomic():
            # Compare-and-set: only one sweep disarms it, so one charge per crossing.
            if AutoRecharge.objects.filter(pk=pk, armed=True).update(armed=False):
                tasks.charge_auto_recharge.delay_on_commit(workspace_id)
                queued.append(workspace_id)
    return queued


def meter_and_warn(now: dt.datetime | None = None) -> dict:
    """Billing's part of the periodic pass: meter, top up, warn. Stopping what can no longer be
    paid for is clusters.enforcement's, driven by the same beat task."""
    run = meter_usage(now)
    return {"machines": run.machines, "posted": str(run.posted), "recharged": trigger_auto_recharges(),
            "warned": warn_low_balances()}
