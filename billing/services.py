"""Every change to money: ledger entries, usage intervals and metering."""

from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Workspace
from billing.models import LedgerEntry, MachineUsage

CENT = Decimal("0.01")
SECONDS_PER_HOUR = Decimal(3600)


def to_cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def accrued(rate: Decimal, start: dt.datetime, end: dt.datetime) -> Decimal:
    """Exact (unrounded) cost of one machine from start to end, accrued per second."""
    elapsed = Decimal((end - start).total_seconds()) if end > start else Decimal(0)
    return rate * elapsed / SECONDS_PER_HOUR


def required_balance(price_per_hour: Decimal) -> Decimal:
    """To start (or grow) a cluster the balance must cover one hour of it, never less than $10."""
    return max(to_cents(price_per_hour), settings.MINIMUM_CREATE_BALANCE)


def post_entry(
    *, workspace_id: int, kind: str, amount: Decimal, idempotency_key: str, description: str,
    state: str = LedgerEntry.State.COMPLETED, cluster_id: int | None = None, environment_id: int | None = None,
) -> tuple[LedgerEntry, bool]:
    """Append a ledger entry once per idempotency key; returns (entry, created)."""
    with transaction.atomic():
        # The workspace row lock serialises every balance change of one workspace, so the
        # cached balance and the ledger can never disagree.
        workspace = Workspace.objects.select_for_update().get(pk=workspace_id)
        existing = LedgerEntry.objects.filter(idempotency_key=idempotency_key).first()
        if existing is not None:
            return existing, False
        amount = to_cents(amount)
        balance = workspace.credit_balance
        if state == LedgerEntry.State.COMPLETED:
            balance = workspace.credit_balance + amount
            Workspace.objects.filter(pk=workspace_id).update(credit_balance=balance)
        entry = LedgerEntry.objects.create(
            workspace_id=workspace_id, kind=kind, amount=amount, state=state, idempotency_key=idempotency_key,
            description=description, cluster_id=cluster_id, environment_id=environment_id, balance_after=balance,
        )
        return entry, True


def start_usage(cluster, nodes, at: dt.datetime) -> None:
    """Open one usage interval per machine, all from `at` (the instant the last one joined)."""
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


def end_usage(cluster, at: dt.datetime) -> None:
    MachineUsage.objects.filter(cluster=cluster, ended_at__isnull=True).update(ended_at=at)


def meter_cluster(cluster_id: int, now: dt.datetime | None = None) -> Decimal:
    """Post what the cluster's machines accrued since the last run; returns the amount posted."""
    now = now or timezone.now()
    posted = Decimal("0.00")
    with transaction.atomic():
        usages = list(MachineUsage.objects.select_for_update().filter(cluster_id=cluster_id).order_by("id"))
        for usage in usages:
            until = min(now, usage.ended_at) if usage.ended_at else now
            if until <= usage.billed_until and usage.ended_at is None:
                continue
            total = to_cents(accrued(usage.rate, usage.started_at, until))
            due = total - usage.posted_amount
            usage.billed_until = max(until, usage.billed_until)
            if due:
                post_entry(
                    workspace_id=usage.workspace_id, kind=LedgerEntry.Kind.USAGE, amount=-due,
                    idempotency_key=f"usage:{usage.pk}:{total}",
                    description=f"Cluster usage {usage.cluster.name}" if hasattr(usage, "cluster") else "Cluster usage",
                    cluster_id=usage.cluster_id, environment_id=usage.environment_id,
                )
                usage.posted_amount = total
                posted += due
            MachineUsage.objects.filter(pk=usage.pk).update(
                billed_until=usage.billed_until, posted_amount=usage.posted_amount
            )
    return posted
