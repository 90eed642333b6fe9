"""Billing emails (text + HTML from templates/emails/), sent once per BillingNotice by a
Celery task queued after commit. Small on purpose: the notifications layer may route them
through its own machinery later."""

from __future__ import annotations

from django.conf import settings
from django.core.mail import EmailMultiAlternatives
from django.db import transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from accounts.models import Role
from billing.models import BillingNotice

SUBJECTS = {
    BillingNotice.Kind.BALANCE_LOW: "Your Runcrate balance lasts under {threshold_hours} hour(s) at the current spend",
    BillingNotice.Kind.BALANCE_EXHAUSTED: "Cluster {cluster_name} was stopped: your balance ran out",
    BillingNotice.Kind.BUDGET_REACHED: "Cluster {cluster_name} was stopped: {environment} reached its monthly budget",
    BillingNotice.Kind.TOP_UP_RECEIVED: "Top-up of ${amount} received",
    BillingNotice.Kind.AUTO_RECHARGE_FAILED: "Auto-recharge of ${amount} failed",
}


def owner_emails(workspace_id: int) -> list[str]:
    from accounts.models import Membership

    return list(
        Membership.objects.filter(workspace_id=workspace_id, role=Role.OWNER)
        .exclude(user__email="")
        .values_list("user__email", flat=True)
    )


def queue_notice(notice_id: int) -> None:
    """Hand the notice to notifications.notify(), inside the caller's transaction: it is
    recorded with the notice, sent after commit, retried while SMTP fails, and skipped for
    members who turned the kind off (see docs/notifications.md). A cluster stopped for its
    balance or budget gets the lifecycle's critical "stopped" email, so those notices send
    nothing here."""
    from notifications.kinds import Kind
    from notifications.services import billing_contact_ids, notify

    notice = BillingNotice.objects.get(pk=notice_id)
    kind = {
        BillingNotice.Kind.BALANCE_LOW: Kind.BALANCE_LOW,
        BillingNotice.Kind.TOP_UP_RECEIVED: Kind.TOPUP_RECEIVED,
        BillingNotice.Kind.AUTO_RECHARGE_FAILED: Kind.AUTO_RECHARGE_FAILED,
    }.get(notice.kind)
    if kind is None:
        return
    notify(
        kind, user_ids=billing_contact_ids(notice.workspace_id),
        context={**notice.context, "workspace_id": notice.workspace_id},
        # One email per notice: a re-armed balance warning is a new notice, hence a new email.
        dedupe_key=f"billing-notice:{notice.pk}", workspace_id=notice.workspace_id,
    )


def create_notice(*, workspace_id: int, kind: str, key: str, context: dict) -> BillingNotice | None:
    """Claim a notice by key and queue its email; None when it was already claimed."""
    from django.db import IntegrityError

    try:
        with transaction.atomic():
            notice = BillingNotice.objects.create(workspace_id=workspace_id, kind=kind, key=key, context=context)
            queue_notice(notice.pk)
            return notice
    except IntegrityError:
        return None


def send_notice(notice_id: int) -> bool:
    """Send one notice's email; a duplicate task finds it claimed and sends nothing."""
    with transaction.atomic():
        if not BillingNotice.objects.filter(pk=notice_id, sent_at__isnull=True).update(sent_at=timezone.now()):
            return False
        notice = BillingNotice.objects.select_related("workspace").get(pk=notice_id)
        to = owner_emails(notice.workspace_id)
        if not to:
            return False
        context = {
            "site_url": settings.SITE_URL, "workspace": notice.workspace, "notice": notice, **notice.context,
            "billing_url": settings.SITE_URL + reverse("billing:overview"),
        }
        template = f"emails/billing_{notice.kind}"
        message = EmailMultiAlternatives(
            subject=SUBJECTS[notice.kind].format(**notice.context),
            body=render_to_string(f"{template}.txt", context),
            from_email=settings.DEFAULT_FROM_EMAIL,
            to=to,
        )
        message.attach_alternative(render_to_string(f"{template}.html", context), "text/html")
        # Sent inside the claim's transaction: if SMTP fails the claim rolls back and the
        # task's retry sends it.
        message.send()
        return True
