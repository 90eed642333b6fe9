"""Stripe: Checkout top-ups (payment mode), card saving for auto-recharge (setup mode), the
webhook that credits once per Checkout Session, and off-session auto-recharge charges.

Every Stripe call goes through one StripeClient built from settings (STRIPE_SECRET_KEY; the
optional STRIPE_API_BASE points it elsewhere, which the tests use for a local fake API).
"""

from __future__ import annotations

import json
import logging
import uuid
from decimal import Decimal, InvalidOperation
from typing import Any

import stripe
from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Workspace
from audit.recording import record
from billing import emails
from billing.ledger import post_entry
from billing.models import AutoRecharge, AutoRechargeAttempt, BillingNotice, LedgerEntry, StripeEvent, TopUp
from config.errors import DomainError
from config.money import format_money, to_cents

log = logging.getLogger(__name__)

MINIMUM_TOP_UP = Decimal("5.00")
MAXIMUM_TOP_UP = Decimal("100000.00")
WEBHOOK_TOLERANCE_SECONDS = 300
DEV_TOP_UP_AMOUNTS = (Decimal("50"), Decimal("500"))


class PaymentError(DomainError):
    """A refusal to show the user (bad amount, Stripe not configured, Stripe said no)."""

    def __init__(self, message: str, code: str = "payment_refused", field: str | None = None) -> None:
        super().__init__(code, message, field=field)


def stripe_enabled() -> bool:
    return bool(settings.STRIPE_SECRET_KEY)


def stripe_client() -> stripe.StripeClient:
    options: dict[str, Any] = {}
    api_base = getattr(settings, "STRIPE_API_BASE", "")
    if api_base:
        options["base_addresses"] = {"api": api_base}
    return stripe.StripeClient(settings.STRIPE_SECRET_KEY or "", max_network_retries=2, **options)


def cents(amount: Decimal) -> int:
    return int(to_cents(amount) * 100)


def _finite(amount: Decimal | str | int | float) -> Decimal:
    """A finite Decimal, or PaymentError: NaN, Infinity and text are refused, not quantized
    (quantizing them, or 1e308, raises InvalidOperation deep in the money code)."""
    if isinstance(amount, str) and not amount.isascii():
        raise PaymentError("Enter an amount in dollars with the digits 0-9, e.g. 50.")
    try:
        amount = Decimal(amount)
    except (InvalidOperation, TypeError, ValueError):
        raise PaymentError("Enter an amount in dollars, e.g. 50.") from None
    if not amount.is_finite():
        raise PaymentError("Enter an amount in dollars, e.g. 50.")
    return amount


def _validate_amount(amount: Decimal) -> Decimal:
    amount = _finite(amount)
    # Bounds before rounding: a huge amount either way is refused, never quantized.
    if amount > MAXIMUM_TOP_UP:
        raise PaymentError(f"The largest top-up is ${MAXIMUM_TOP_UP:,.0f}; contact sales for more.")
    if amount < MINIMUM_TOP_UP:
        raise PaymentError(f"The smallest top-up is {format_money(MINIMUM_TOP_UP)}.")
    amount = to_cents(amount)
    if amount < MINIMUM_TOP_UP:
        raise PaymentError(f"The smallest top-up is {format_money(MINIMUM_TOP_UP)}.")
    if amount > MAXIMUM_TOP_UP:
        raise PaymentError(f"The largest top-up is ${MAXIMUM_TOP_UP:,.0f}; contact sales for more.")
    return amount


# --- Checkout ---------------------------------------------------------------------------------


def create_top_up_session(*, workspace: Workspace, amount: Decimal, user: User | None, success_url: str, cancel_url: str) -> TopUp:
    """A Checkout Session in payment mode for `amount`; the webhook credits it once paid."""
    amount = _validate_amount(amount)
    if not stripe_enabled():
        raise PaymentError("Card payments are not configured on this installation.")
    recharge = AutoRecharge.objects.filter(workspace=workspace).first()
    params: dict[str, Any] = {
        "mode": "payment",
        "line_items": [{
            "quantity": 1,
            "price_data": {
                "currency": "usd", "unit_amount": cents(amount),
                "product_data": {"name": f"Runcrate credits for {workspace.name}"},
            },
        }],
        "client_reference_id": str(workspace.pk),
        "metadata": {"workspace_id": str(workspace.pk), "purpose": "top_up"},
        "success_url": success_url,
        "cancel_url": cancel_url,
    }
    if recharge and recharge.stripe_customer_id:
        params["customer"] = recharge.stripe_customer_id
    try:
        # stripe's params are TypedDicts of Literals; these dicts are built from our values.
        session = stripe_client().v1.checkout.sessions.create(params=params)  # type: ignore[arg-type]
    except stripe.StripeError as exc:
        log.warning("Checkout session for workspace %s failed: %s", workspace.pk, exc)
        raise PaymentError("The payment page could not be opened. Try again in a moment.") from exc
    with transaction.atomic():
        top_up = TopUp.objects.create(
            workspace=workspace, mode=TopUp.Mode.PAYMENT, checkout_session_id=session.id, amount=amount,
            url=session.url or "", created_by=user,
        )
        record(workspace.pk, "billing.top_up_start", top_up, label=f"Top-up {format_money(amount)}",
               after={"amount": amount, "status": top_up.status})
    return top_up


def create_card_setup_session(*, workspace: Workspace, user: User | None, success_url: str, cancel_url: str) -> TopUp:
    """A Checkout Session in setup mode that saves a card for off-session auto-recharges."""
    if not stripe_enabled():
        raise PaymentError("Card payments are not configured on this installation.")
    client = stripe_client()
    recharge, _ = AutoRecharge.objects.get_or_create(workspace=workspace)
    try:
        if not recharge.stripe_customer_id:
            customer = client.v1.customers.create(
                params={"name": workspace.name, "email": getattr(user, "email", "") or None,  # type: ignore[arg-type]
                        "metadata": {"workspace_id": str(workspace.pk)}},
            )
            AutoRecharge.objects.filter(pk=recharge.pk).update(stripe_customer_id=customer.id)
            recharge.stripe_customer_id = customer.id
        session = client.v1.checkout.sessions.create(
            params={  # type: ignore[arg-type]
                "mode": "setup", "currency": "usd", "customer": recharge.stripe_customer_id,
                "payment_method_types": ["card"],
                "client_reference_id": str(workspace.pk),
                "metadata": {"workspace_id": str(workspace.pk), "purpose": "auto_recharge_card"},
                "success_url": success_url, "cancel_url": cancel_url,
            }
        )
    except stripe.StripeError as exc:
        log.warning("Setup session for workspace %s failed: %s", workspace.pk, exc)
        raise PaymentError("The card page could not be opened. Try again in a moment.") from exc
    return TopUp.objects.create(
        workspace=workspace, mode=TopUp.Mode.SETUP, checkout_session_id=session.id, url=session.url or "",
        created_by=user,
    )


# --- webhook ------------------------------------------------------------------------------------


def verify_event(payload: bytes, signature: str | None) -> dict:
    """Check the Stripe-Signature over the raw body (and its timestamp) and parse the event.
    Raises stripe.SignatureVerificationError or ValueError."""
    stripe.WebhookSignature.verify_header(
        payload, signature, settings.STRIPE_WEBHOOK_SECRET, tolerance=WEBHOOK_TOLERANCE_SECONDS
    )
    event = json.loads(payload)
    if not isinstance(event, dict) or not event.get("id") or not event.get("type"):
        raise ValueError("not a Stripe event")
    return event


class MalformedEvent(ValueError):
    """A signed event whose object is not what its type promises: recorded and answered 200
    (Stripe would otherwise redeliver it for days), never applied."""


def handle_event(event: dict) -> str:
    """Apply one verified event once; returns what happened (for logs and tests)."""
    data = event.get("data")
    obj = data.get("object") if isinstance(data, dict) else None
    event_id, event_type = str(event["id"])[:255], str(event["type"])[:100]
    object_id = str(obj.get("id", ""))[:255] if isinstance(obj, dict) else ""
    with transaction.atomic():
        try:
            # The unique event id makes a redelivery a no-op; a concurrent duplicate waits
            # on this insert until the first commits, then fails it.
            with transaction.atomic():
                StripeEvent.objects.create(event_id=event_id, type=event_type, object_id=object_id)
        except IntegrityError:
            return "duplicate"
        handler = HANDLERS.get(event_type)
        if handler is None:
            return "ignored"
        try:
            if not isinstance(obj, dict):
                raise MalformedEvent("its data.object is not an object")
            # A savepoint: a handler that fails half-way leaves nothing behind but the event row.
            with transaction.atomic():
                return handler(obj)
        except (MalformedEvent, KeyError, TypeError, AttributeError, InvalidOperation) as exc:
            log.error("Stripe event %s (%s) is malformed and was not applied: %r", event_id, event_type, exc)
            return "malformed"


def _credit_session(session: dict) -> str:
    top_up = TopUp.objects.filter(checkout_session_id=session.get("id", ""), mode=TopUp.Mode.PAYMENT).first()
    if top_up is None:
        return "unknown_session"
    paid = session.get("amount_total")
    amount = Decimal(paid) / 100 if isinstance(paid, int) else top_up.amount
    # One ledger entry per Checkout Session, whichever event (completed or async success,
    # first or fifth delivery) gets here first.
    _, created = post_entry(
        workspace_id=top_up.workspace_id, kind=LedgerEntry.Kind.DEPOSIT, amount=amount,
        idempotency_key=f"stripe:checkout:{top_up.checkout_session_id}",
        description=f"Top-up by card (Stripe {top_up.checkout_session_id[-8:]})",
    )
    TopUp.objects.filter(pk=top_up.pk).exclude(status=TopUp.Status.PAID).update(
        status=TopUp.Status.PAID, completed_at=timezone.now()
    )
    if created:
        # Stripe's callback, inside handle_event's transaction: the product credits the payment.
        record(top_up.workspace_id, "billing.top_up", top_up, label=f"Top-up {format_money(amount)}", system=True,
               before={"status": top_up.status}, after={"status": TopUp.Status.PAID, "amount": amount})
        emails.create_notice(
            workspace_id=top_up.workspace_id, kind=BillingNotice.Kind.TOP_UP_RECEIVED,
            key=f"top_up:{top_up.checkout_session_id}", context={"amount": str(to_cents(amount))},
        )
    return "credited" if created else "already_credited"


def _session_completed(session: dict) -> str:
    if session.get("mode") == "setup":
        return _card_saved(session)
    if session.get("payment_status") == "paid":
        return _credit_session(session)
    return "awaiting_payment"


def _session_async_succeeded(session: dict) -> str:
    return _credit_session(session)


def _session_failed(session: dict) -> str:
    TopUp.objects.filter(checkout_session_id=session.get("id", ""), status=TopUp.Status.OPEN).update(
        status=TopUp.Status.FAILED, completed_at=timezone.now()
    )
    return "failed"


def _session_expired(session: dict) -> str:
    TopUp.objects.filter(checkout_session_id=session.get("id", ""), status=TopUp.Status.OPEN).update(
        status=TopUp.Status.EXPIRED, completed_at=timezone.now()
    )
    return "expired"


def _card_saved(session: dict) -> str:
    top_up = TopUp.objects.filter(checkout_session_id=session.get("id", ""), mode=TopUp.Mode.SETUP).first()
    if top_up is None or not session.get("setup_intent"):
        return "unknown_session"
    setup_intent = session["setup_intent"]
    if isinstance(setup_intent, str):
        retrieved = stripe_client().v1.setup_intents.retrieve(setup_intent, params={"expand": ["payment_method"]})
        setup_intent = retrieved.to_dict()
    payment_method = setup_intent["payment_method"]
    label = ""
    if not isinstance(payment_method, str):
        card = payment_method.get("card") or {}
        label = f"{card.get('brand', 'card')} •••• {card.get('last4', '????')}"
        payment_method = payment_method["id"]
    AutoRecharge.objects.update_or_create(
        workspace_id=top_up.workspace_id,
        defaults={"stripe_customer_id": session.get("customer") or "", "stripe_payment_method_id": payment_method,
                  "card_label": label},
    )
    TopUp.objects.filter(pk=top_up.pk).update(status=TopUp.Status.COMPLETE, completed_at=timezone.now())
    return "card_saved"


def _payment_intent_succeeded(intent: dict) -> str:
    metadata = intent.get("metadata") or {}
    if metadata.get("purpose") != "auto_recharge":
        return "ignored"
    workspace_id, amount = str(metadata.get("workspace_id", "")), intent.get("amount")
    known = workspace_id.isascii() and workspace_id.isdigit() and len(workspace_id) <= 18
    if not known or not Workspace.objects.filter(pk=int(workspace_id)).exists():
        raise MalformedEvent(f"no workspace {workspace_id[:40]!r}")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0 or not isinstance(intent.get("id"), str):
        raise MalformedEvent("no positive whole amount in cents, or no id")
    return _credit_auto_recharge(int(workspace_id), intent["id"], Decimal(amount) / 100)


HANDLERS = {
    "checkout.session.completed": _session_completed,
    "checkout.session.async_payment_succeeded": _session_async_succeeded,
    "checkout.session.async_payment_failed": _session_failed,
    "checkout.session.expired": _session_expired,
    "payment_intent.succeeded": _payment_intent_succeeded,
}


# --- auto-recharge --------------------------------------------------------------------------------


@transaction.atomic
def _credit_auto_recharge(workspace_id: int, payment_intent_id: str, amount: Decimal) -> str:
    entry, created = post_entry(
        workspace_id=workspace_id, kind=LedgerEntry.Kind.AUTO_RECHARGE, amount=amount,
        idempotency_key=f"stripe:payment_intent:{payment_intent_id}",
        description="Auto-recharge by saved card",
    )
    if created:
        record(workspace_id, "billing.auto_recharge", entry, label=f"Auto-recharge {format_money(amount)}", system=True,
               after={"amount": amount})
    AutoRechargeAttempt.objects.filter(payment_intent_id=payment_intent_id).update(status=AutoRechargeAttempt.Status.SUCCEEDED)
    return "credited" if created else "already_credited"


def charge_auto_recharge(workspace_id: int) -> AutoRechargeAttempt | None:
    """One off-session charge of the saved card (the sweep disarmed the setting first, so this
    runs once per crossing). A failure is recorded, emailed and not retried."""
    recharge = AutoRecharge.objects.filter(workspace_id=workspace_id, enabled=True).first()
    if recharge is None or not recharge.has_card:
        return None
    attempt = AutoRechargeAttempt.objects.create(workspace_id=workspace_id, amount=recharge.amount)
    try:
        intent = stripe_client().v1.payment_intents.create(
            params={
                "amount": cents(recharge.amount), "currency": "usd", "customer": recharge.stripe_customer_id,
                "payment_method": recharge.stripe_payment_method_id, "off_session": True, "confirm": True,
                "description": "Runcrate auto-recharge",
                "metadata": {"workspace_id": str(workspace_id), "purpose": "auto_recharge", "attempt": str(attempt.pk)},
            },
            options={"idempotency_key": f"auto-recharge-{attempt.pk}"},
        )
    except stripe.StripeError as exc:
        _fail_auto_recharge(recharge, attempt, getattr(exc, "user_message", None) or str(exc) or "declined",
                            payment_intent_id=getattr(getattr(exc, "error", None), "payment_intent", None))
        return attempt
    AutoRechargeAttempt.objects.filter(pk=attempt.pk).update(payment_intent_id=intent.id)
    attempt.payment_intent_id = intent.id
    if intent.status == "succeeded":
        _credit_auto_recharge(workspace_id, intent.id, Decimal(intent.amount) / 100)
        attempt.status = AutoRechargeAttempt.Status.SUCCEEDED
    elif intent.status != "processing":
        _fail_auto_recharge(recharge, attempt, f"the payment needs your action ({intent.status})")
    return attempt


def _fail_auto_recharge(recharge: AutoRecharge, attempt: AutoRechargeAttempt, message: str, payment_intent_id: str | None = None) -> None:
    message = message[:250]
    with transaction.atomic():
        AutoRechargeAttempt.objects.filter(pk=attempt.pk).update(status=AutoRechargeAttempt.Status.FAILED, error=message)
        attempt.status, attempt.error = AutoRechargeAttempt.Status.FAILED, message
        AutoRecharge.objects.filter(pk=recharge.pk).update(last_failure=message, last_failure_at=timezone.now())
        post_entry(
            workspace_id=recharge.workspace_id, kind=LedgerEntry.Kind.AUTO_RECHARGE, amount=recharge.amount,
            state=LedgerEntry.State.FAILED, idempotency_key=f"auto-recharge-failed:{attempt.pk}",
            description=f"Auto-recharge failed: {message}"[:255],
        )
        emails.create_notice(
            workspace_id=recharge.workspace_id, kind=BillingNotice.Kind.AUTO_RECHARGE_FAILED,
            key=f"auto_recharge_failed:{attempt.pk}",
            context={"amount": str(recharge.amount), "threshold": str(recharge.threshold), "error": message},
        )


def save_auto_recharge(*, workspace: Workspace, enabled: bool, threshold: Decimal, amount: Decimal) -> AutoRecharge:
    amount = _validate_amount(amount)
    threshold = _finite(threshold)
    if threshold < 0:
        raise PaymentError("The threshold cannot be negative.")
    if threshold > MAXIMUM_TOP_UP:
        raise PaymentError(f"The threshold can be at most ${MAXIMUM_TOP_UP:,.0f}.")
    threshold = to_cents(threshold)
    with transaction.atomic():
        recharge, _ = AutoRecharge.objects.get_or_create(workspace=workspace)
        if enabled and not recharge.has_card:
            raise PaymentError("Save a card first: auto-recharge charges it when the balance falls under the threshold.")
        before = {"enabled": recharge.enabled, "threshold": recharge.threshold, "amount": recharge.amount}
        AutoRecharge.objects.filter(pk=recharge.pk).update(
            enabled=enabled, threshold=threshold, amount=amount,
            # A new setting starts armed only if the balance is above it: no surprise charge on save.
            armed=workspace.credit_balance >= threshold,
        )
        recharge.refresh_from_db()
        record(workspace.pk, "billing.auto_recharge_change", recharge, label="Auto-recharge", before=before,
               after={"enabled": recharge.enabled, "threshold": recharge.threshold, "amount": recharge.amount})
    return recharge


# --- development top-up ---------------------------------------------------------------------------


def dev_top_up_available(workspace: Workspace) -> bool:
    """Any workspace, on a development machine only: DEBUG on and no Stripe keys, where a
    customer trying the product has no other way to add credit."""
    return settings.DEBUG and not stripe_enabled()


def dev_top_up(*, workspace: Workspace, amount: Decimal) -> LedgerEntry:
    if not dev_top_up_available(workspace):
        raise PaymentError("Development top-ups exist only with DEBUG on and no Stripe keys.")
    amount = _validate_amount(amount)
    with transaction.atomic():
        entry, _ = post_entry(
            workspace_id=workspace.pk, kind=LedgerEntry.Kind.ADJUSTMENT, amount=amount,
            idempotency_key=f"dev-top-up:{uuid.uuid4()}", description="Development top-up (no payment, DEBUG only)",
        )
        record(workspace.pk, "billing.top_up", entry, label=f"Development top-up {format_money(amount)}",
               after={"amount": amount, "balance": entry.balance_after})
    return entry
