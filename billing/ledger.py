"""The ledger: append-only entries with a cached balance beside them (docs/billing.md)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.db import transaction

from accounts.models import Workspace
from billing.models import AutoRecharge, LedgerEntry
from config.money import to_cents


def post_entry(
    *, workspace_id: int, kind: str, amount: Decimal, idempotency_key: str, description: str,
    state: str = LedgerEntry.State.COMPLETED, cluster_id: int | None = None, environment_id: int | None = None,
    period: dt.date | None = None,
) -> tuple[LedgerEntry, bool]:
    """Append a ledger entry once per idempotency key; returns (entry, created)."""
    with transaction.atomic():
        # The workspace row lock serialises every balance change of one workspace, so the
        # cached balance and the ledger can never disagree, and two posts of one key queue
        # here and the second finds the first's entry.
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
            period=period,
        )
        if state == LedgerEntry.State.COMPLETED and amount > 0:
            # A credit may lift the balance back over the auto-recharge threshold: arm it again.
            AutoRecharge.objects.filter(workspace_id=workspace_id, armed=False, threshold__lte=balance).update(armed=True)
        return entry, True
