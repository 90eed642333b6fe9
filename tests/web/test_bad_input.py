"""Bad input is a 4xx or a message on the page, never a 500: amounts, months, switchers,
NUL bytes, malformed signed Stripe events, unknown socket paths — and a property test that
throws arbitrary text at every dashboard form."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import Workspace
from billing.models import AutoRecharge, LedgerEntry, StripeEvent
from tests.billing.test_stripe import SECRET, event, post
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

BAD_AMOUNTS = ["NaN", "nan", "-NaN", "sNaN", "Infinity", "-Infinity", "inf", "1e308", "1E+400", "9" * 60, "-1e308", "0x10", "", "  "]


@pytest.fixture
def stripe_on(settings):
    settings.STRIPE_SECRET_KEY = "sk_test_123"
    settings.STRIPE_WEBHOOK_SECRET = SECRET


@pytest.mark.parametrize("amount", BAD_AMOUNTS)
def test_a_top_up_of_a_non_amount_is_a_message_not_a_500(owner, stripe_on, amount):
    response = client_for(owner).post(reverse("billing:top_up"), {"amount": amount}, follow=True)
    assert response.status_code == 200
    assert "Enter an amount" in response.text or "The largest top-up" in response.text or "smallest" in response.text


@pytest.mark.parametrize("amount", BAD_AMOUNTS)
def test_auto_recharge_with_a_non_amount_is_a_message_and_saves_nothing(owner, workspace, amount):
    client = client_for(owner)
    for fields in ({"threshold": amount, "amount": "50"}, {"threshold": "20", "amount": amount}):
        response = client.post(reverse("billing:auto_recharge"), fields, follow=True)
        assert response.status_code == 200
    assert not AutoRecharge.objects.filter(workspace=workspace).exclude(threshold=0).exists()


@pytest.mark.parametrize("month", ["9999-12", "0000-01", "2026-13", "2026-00", "10000-01", "２０２６-０１", "2026-1-1", "-1-01"])
def test_a_month_out_of_range_is_a_404(owner, month):
    client = client_for(owner)
    assert client.get(reverse("billing:overview"), {"month": month}).status_code == 404
    assert client.get(reverse("billing:export_csv"), {"month": month}).status_code == 404


@pytest.mark.parametrize("target", ["clusters:list", "logout", "foo", "accounts:ssh_key_delete", "javascript:alert(1)",
                                    "//evil.example/", "http://[", "\\\\evil"])
def test_the_environment_switcher_given_a_next_that_is_not_a_local_path_goes_to_the_list(owner, environment, target):
    response = client_for(owner).post(
        reverse("accounts:switch_environment"), {"environment": environment.pk, "next": target}
    )
    assert response.status_code == 302 and response["Location"] == reverse("clusters:list")


@pytest.mark.parametrize("value", ["²", "99999999999999999999", "1e3", "-1"])
def test_a_switcher_given_a_number_it_cannot_hold_is_a_404(owner, value):
    client = client_for(owner)
    assert client.post(reverse("accounts:switch_environment"), {"environment": value}).status_code == 404
    assert client.post(reverse("accounts:switch_workspace"), {"workspace": value}).status_code == 404


@pytest.mark.parametrize("url", ["/offers/?gpu=a%00b", "/clusters/?show=%00", "/billing/?month=2026-01%00",
                                 "/clusters/new/?offer=%00&machines=4"])
def test_a_nul_byte_in_the_query_string_is_a_400(owner, url):
    assert client_for(owner).get(url).status_code == 400


def test_a_nul_byte_in_a_posted_field_is_a_400_or_a_field_error(owner):
    response = client_for(owner).post(reverse("accounts:ssh_keys"), {"name": "a\x00b", "public_key": "x"})
    assert response.status_code in (200, 400) and not response.status_code >= 500


class TestMalformedStripeEvents:
    @pytest.fixture(autouse=True)
    def _stripe(self, stripe_on):
        pass

    @pytest.mark.parametrize(
        "obj",
        [
            {"id": "pi_1", "metadata": {"purpose": "auto_recharge", "workspace_id": "abc"}, "amount": 5000},
            {"id": "pi_1", "metadata": {"purpose": "auto_recharge", "workspace_id": "999999"}, "amount": 5000},
            {"id": "pi_1", "metadata": {"purpose": "auto_recharge", "workspace_id": "9" * 30}, "amount": 5000},
            {"id": "pi_1", "metadata": {"purpose": "auto_recharge", "workspace_id": "{ws}"}},
            {"id": "pi_1", "metadata": {"purpose": "auto_recharge", "workspace_id": "{ws}"}, "amount": "lots"},
            {"id": "pi_1", "metadata": "auto_recharge"},
        ],
        ids=["non-numeric workspace", "unknown workspace", "huge workspace id", "no amount", "text amount", "metadata not an object"],
    )
    def test_a_signed_payment_intent_with_a_malformed_object_is_200_logged_and_credits_nothing(self, workspace, obj, caplog):
        obj = json.loads(json.dumps(obj).replace("{ws}", str(workspace.pk)))
        response = post(event("payment_intent.succeeded", obj))

        assert response.status_code == 200
        assert not LedgerEntry.objects.exists()
        assert StripeEvent.objects.filter(event_id="evt_1").exists()  # a redelivery is a duplicate
        assert post(event("payment_intent.succeeded", obj)).content == b"duplicate"

    @pytest.mark.parametrize("data", [{"object": "cs_1"}, {"object": ["x"]}, "string", {"object": {"id": {"a": 1}, "mode": "setup", "setup_intent": {"payment_method": {}}}}])
    def test_a_signed_checkout_event_with_a_malformed_object_is_200(self, data):
        payload = json.dumps({"id": "evt_2", "object": "event", "type": "checkout.session.completed", "data": data})
        assert post(payload).status_code == 200
        assert Workspace.objects.filter(credit_balance__gt=Decimal(0)).count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("path, code", [("/ws/nowhere/", 4404), ("/ws/clusters/abc/", 4404), ("/", 4404),
                                        ("/ws/clusters/99999999999999999999/", 4403)])
async def test_an_unknown_or_impossible_socket_path_is_closed_cleanly(path, code, settings):
    from config.asgi import application

    socket = WebsocketCommunicator(application, path, headers=[(b"origin", b"http://127.0.0.1:8000")])
    connected, close_code = await socket.connect(timeout=5)
    assert (connected, close_code) == (False, code)
    await socket.disconnect()


DASHBOARD_FORMS = [
    ("accounts:ssh_keys", ["name", "public_key"]),
    ("accounts:members", ["username", "role"]),
    ("accounts:environments", ["name", "monthly_budget"]),
    ("accounts:switch_environment", ["environment", "next"]),
    ("accounts:switch_workspace", ["workspace"]),
    ("api:keys", ["name"]),
    ("clusters:volumes", ["name", "size_gb"]),
    ("clusters:create", ["name", "offer", "machines", "software", "volume", "ssh_keys"]),
    ("billing:top_up", ["amount"]),
    ("billing:auto_recharge", ["enabled", "threshold", "amount"]),
    ("notifications:settings", ["email", "kinds"]),
    ("quotes:request", ["name", "email", "company", "gpu_model", "machine_count", "interconnect", "details"]),
]
nasty_text = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["NaN", "Infinity", "-1", "1e308", "9" * 40, "", " ", "\x00", "²", "../..", "2026-13", "'\"<>"]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(form=st.sampled_from(DASHBOARD_FORMS), data=st.data())
def test_no_dashboard_form_answers_a_5xx_whatever_is_posted(owner, environment, stripe_on, form, data):
    url_name, fields = form
    posted = {field: data.draw(nasty_text, label=field) for field in fields}
    client = Client(raise_request_exception=False)
    client.force_login(owner)

    response = client.post(reverse(url_name), posted)

    assert response.status_code < 500, (url_name, posted)
