"""Stripe top-ups and auto-recharge: real signatures over the raw body, a local fake API."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from decimal import Decimal

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from accounts.models import Workspace
from billing import payments
from billing import services as billing
from billing.models import AutoRecharge, BillingNotice, LedgerEntry, StripeEvent, TopUp
from clusters import enforcement
from tests.billing.conftest import client_for
from tests.billing.fake_stripe import FakeStripe

SECRET = "whsec_test_secret"
WEBHOOK = "/billing/stripe/webhook/"


@pytest.fixture(autouse=True)
def stripe_settings(settings):
    settings.STRIPE_SECRET_KEY = "sk_test_123"
    settings.STRIPE_WEBHOOK_SECRET = SECRET
    return settings


def sign(payload: str, secret: str = SECRET, timestamp: int | None = None) -> str:
    """The Stripe-Signature header exactly as Stripe computes it: HMAC-SHA256 of "{t}.{payload}"."""
    timestamp = int(time.time()) if timestamp is None else timestamp
    mac = hmac.new(secret.encode(), f"{timestamp}.{payload}".encode(), hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def event(kind: str, obj: dict, event_id: str = "evt_1") -> str:
    return json.dumps({"id": event_id, "object": "event", "type": kind, "data": {"object": obj}})


def post(payload: str, signature: str | None = None, client: Client | None = None):
    return (client or Client()).post(
        WEBHOOK, data=payload, content_type="application/json", HTTP_STRIPE_SIGNATURE=signature or sign(payload)
    )


def session(top_up: TopUp, payment_status: str = "paid") -> dict:
    return {"id": top_up.checkout_session_id, "object": "checkout.session", "mode": "payment",
            "payment_status": payment_status, "amount_total": int(top_up.amount * 100)}


@pytest.fixture
def top_up(workspace):
    return TopUp.objects.create(workspace=workspace, checkout_session_id="cs_test_abc", amount=Decimal("25.00"))


def balance(workspace) -> Decimal:
    return Workspace.objects.get(pk=workspace.pk).credit_balance


@pytest.mark.django_db
def test_a_paid_session_is_credited_once_with_a_receipt_email(workspace, owner, top_up, mailoutbox):
    payload = event("checkout.session.completed", session(top_up))
    response = post(payload)
    assert response.status_code == 200 and response.content == b"credited"
    assert balance(workspace) == Decimal("1025.00")
    assert post(payload).content == b"duplicate"
    later = event("checkout.session.async_payment_succeeded", session(top_up), event_id="evt_2")
    assert post(later).content == b"already_credited"
    assert balance(workspace) == Decimal("1025.00")
    entry = LedgerEntry.objects.get(workspace=workspace)
    assert (entry.kind, entry.state) == ("deposit", "completed")
    assert TopUp.objects.get(pk=top_up.pk).status == "paid"
    assert BillingNotice.objects.filter(kind="top_up_received").count() == 1


@pytest.mark.django_db
def test_an_unpaid_session_credits_nothing_until_its_async_payment_succeeds(workspace, top_up):
    assert post(event("checkout.session.completed", session(top_up, "unpaid"))).content == b"awaiting_payment"
    assert balance(workspace) == Decimal("1000.00")
    post(event("checkout.session.async_payment_succeeded", session(top_up), event_id="evt_2"))
    assert balance(workspace) == Decimal("1025.00")


@pytest.mark.django_db
def test_events_in_reverse_order_still_credit_once(workspace, top_up):
    post(event("checkout.session.async_payment_succeeded", session(top_up), event_id="evt_9"))
    post(event("checkout.session.completed", session(top_up), event_id="evt_8"))
    assert balance(workspace) == Decimal("1025.00")
    assert LedgerEntry.objects.count() == 1


@pytest.mark.django_db
def test_a_bad_signature_is_a_400_and_changes_nothing(workspace, top_up):
    payload = event("checkout.session.completed", session(top_up))
    assert post(payload, sign(payload, secret="whsec_wrong")).status_code == 400
    assert post(payload, "t=123,v1=deadbeef").status_code == 400
    assert Client().post(WEBHOOK, data=payload, content_type="application/json").status_code == 400
    tampered = payload.replace("2500", "2500000")
    assert post(tampered, sign(payload)).status_code == 400
    assert balance(workspace) == Decimal("1000.00") and not StripeEvent.objects.exists()


@pytest.mark.django_db
def test_a_stale_timestamp_is_a_400(workspace, top_up):
    payload = event("checkout.session.completed", session(top_up))
    stale = int(time.time()) - payments.WEBHOOK_TOLERANCE_SECONDS - 60
    assert post(payload, sign(payload, timestamp=stale)).status_code == 400
    assert balance(workspace) == Decimal("1000.00")


@pytest.mark.django_db
def test_the_webhook_needs_no_csrf_token(workspace, top_up):
    payload = event("checkout.session.completed", session(top_up))
    assert post(payload, client=Client(enforce_csrf_checks=True)).status_code == 200


@pytest.mark.django_db
def test_a_session_we_never_created_credits_nothing(workspace):
    fake = {"id": "cs_forged", "mode": "payment", "payment_status": "paid", "amount_total": 10 ** 8}
    assert post(event("checkout.session.completed", fake)).content == b"unknown_session"
    assert not LedgerEntry.objects.exists()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_same_event_five_times_at_once_credits_once(workspace, top_up):
    payload = event("checkout.session.completed", session(top_up))
    header = sign(payload)
    barrier = threading.Barrier(5)
    codes = []

    def deliver():
        try:
            barrier.wait()
            codes.append(post(payload, header).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [200] * 5
    assert balance(workspace) == Decimal("1025.00")
    assert LedgerEntry.objects.filter(kind="deposit").count() == 1


@pytest.mark.django_db
def test_top_up_opens_a_checkout_session_in_payment_mode(settings, workspace, owner):
    with FakeStripe() as fake:
        settings.STRIPE_API_BASE = fake.url
        response = client_for(owner).post(reverse("billing:top_up"), {"amount": "40"})
        assert response.status_code == 302
        assert response["Location"].startswith("https://checkout.stripe.test/c/pay/cs_test_")
        method, path, form = fake.requests[-1]
        assert (method, path) == ("POST", "/v1/checkout/sessions")
        assert form["mode"] == "payment"
        assert form["line_items[0][price_data][unit_amount]"] == "4000"
        assert form["metadata[workspace_id]"] == str(workspace.pk)
    top_up = TopUp.objects.get()
    assert (top_up.amount, top_up.status, top_up.mode) == (Decimal("40.00"), "open", "payment")
    assert balance(workspace) == Decimal("1000.00")  # nothing until the webhook says paid


@pytest.mark.django_db
def test_a_top_up_under_5_dollars_is_refused_without_calling_stripe(settings, workspace, owner):
    with FakeStripe() as fake:
        settings.STRIPE_API_BASE = fake.url
        response = client_for(owner).post(reverse("billing:top_up"), {"amount": "4.99"}, follow=True)
        assert "The smallest top-up is $5.00" in response.content.decode()
        assert fake.requests == []
    assert not TopUp.objects.exists()


@pytest.mark.django_db
def test_a_card_saved_in_setup_mode_arms_auto_recharge(settings, workspace, owner):
    with FakeStripe() as fake:
        settings.STRIPE_API_BASE = fake.url
        response = client_for(owner).post(reverse("billing:save_card"))
        assert response.status_code == 302
        setup = TopUp.objects.get(mode="setup")
        assert [p for _, p, _ in fake.requests] == ["/v1/customers", "/v1/checkout/sessions"]
        assert fake.requests[-1][2]["mode"] == "setup"
        completed = {"id": setup.checkout_session_id, "mode": "setup", "customer": "cus_1", "setup_intent": "seti_1"}
        assert post(event("checkout.session.completed", completed)).content == b"card_saved"
    recharge = AutoRecharge.objects.get(workspace=workspace)
    assert recharge.has_card and recharge.card_label == "visa •••• 4242"


def _card_on_file(workspace, threshold="100", amount="50") -> AutoRecharge:
    return AutoRecharge.objects.create(
        workspace=workspace, enabled=True, threshold=Decimal(threshold), amount=Decimal(amount), armed=True,
        stripe_customer_id="cus_1", stripe_payment_method_id="pm_card_1",
    )


@pytest.mark.django_db(transaction=True)
def test_auto_recharge_charges_once_per_crossing(settings, workspace, owner):
    _card_on_file(workspace)
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("80.00"))
    with FakeStripe() as fake:
        settings.STRIPE_API_BASE = fake.url
        assert billing.trigger_auto_recharges() == [workspace.pk]  # the task runs eagerly after commit
        assert billing.trigger_auto_recharges() == []  # $130 now, over the threshold
        charges = [r for r in fake.requests if r[1] == "/v1/payment_intents"]
        assert len(charges) == 1 and charges[0][2]["off_session"] == "true" and charges[0][2]["amount"] == "5000"
    assert balance(workspace) == Decimal("130.00")
    entry = LedgerEntry.objects.get(kind="auto_recharge")
    assert (entry.amount, entry.state) == (Decimal("50.00"), "completed")
    # The credit lifted the balance over the threshold: the next crossing charges again.
    assert AutoRecharge.objects.get(workspace=workspace).armed


@pytest.mark.django_db(transaction=True)
def test_a_declined_auto_recharge_is_not_retried_and_emails_the_owner(settings, workspace, owner, mailoutbox):
    _card_on_file(workspace)
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("80.00"))
    with FakeStripe() as fake:
        settings.STRIPE_API_BASE = fake.url
        fake.decline = True
        billing.trigger_auto_recharges()
        billing.trigger_auto_recharges()
        enforcement.meter_and_enforce()
        assert len([r for r in fake.requests if r[1] == "/v1/payment_intents"]) == 1
    assert balance(workspace) == Decimal("80.00")
    failed = LedgerEntry.objects.get(kind="auto_recharge")
    assert failed.state == "failed" and "declined" in failed.description
    assert [m.subject for m in mailoutbox] == ["Auto-recharge of $50.00 failed"]
    assert mailoutbox[0].to == [owner.email]
