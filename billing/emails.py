"""Billing notices: a BillingNotice row claims each email by key (once per event), and
queue_notice hands it to notifications.notify(), which renders, sends and retries it."""

from __future__ import annotations

from django.db import IntegrityError, transaction

from accounts.models import billing_contact_ids
from billing.models import BillingNotice
from notifications.kinds import Kind
from notifications.services import notify

# Each notice is one email of this kind.
NOTICE_KINDS: dict[str, Kind] = {
    BillingNotice.Kind.BALANCE_LOW: Kind.BALANCE_LOW,
    BillingNotice.Kind.TOP_UP_RECEIVED: Kind.TOPUP_RECEIVED,
    BillingNotice.Kind.AUTO_RECHARGE_FAILED: Kind.AUTO_RECHARGE_FAILED,
}


def queue_notice(notice_id: int) -> None:
    """Hand the notice to notifications.notify(), inside the caller's transaction: it is
    recorded with the notice, sent after commit, retried while SMTP fails, and skipped for
    members who turned the kind off (see docs/notifications.md). A cluster stopped for its
    balance or budget gets the lifecycle's critical "stopped" email; billing keeps no notice
    of its own for that."""
    notice = BillingNotice.objects.get(pk=notice_id)
    notify(
        NOTICE_KINDS[notice.kind], user_ids=billing_contact_ids(notice.workspace_id),
        context={**notice.context, "workspace_id": notice.workspace_id},
        # One email per notice: a re-armed balance warning is a new notice, hence a new email.
        dedupe_key=f"billing-notice:{notice.pk}", workspace_id=notice.workspace_id,
    )


def create_notice(*, workspace_id: int, kind: str, key: str, context: dict) -> BillingNotice | None:
    """Claim a notice by key and queue its email; None when it was already claimed."""
    try:
        with transaction.atomic():
            notice = BillingNotice.objects.create(workspace_id=workspace_id, kind=kind, key=key, context=context)
            queue_notice(notice.pk)
            return notice
    except IntegrityError:
        return None
