"""Pages and API answers with secrets, money or members are never cached; money is typed with
the digits 0-9; the instances list honours X-Environment."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from accounts.models import Environment
from api.keys import create_api_key
from billing.models import AutoRecharge, LedgerEntry
from config.money import parse_amount
from tests.api.conftest import ApiClient, make_cluster
from tests.factories import machine_type_with_hosts
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db


def no_store(response) -> bool:
    return "no-store" in response.get("Cache-Control", "")


class TestNothingSecretIsCached:
    @pytest.mark.parametrize("page", ["billing:overview", "billing:export_csv", "accounts:members", "api:keys",
                                      "clusters:list", "accounts:environments", "mfa_index"])
    def test_signed_in_pages_are_no_store(self, owner, page):
        response = client_for(owner).get(reverse(page))
        assert response.status_code == 200
        assert no_store(response), response.get("Cache-Control")

    def test_the_2fa_recovery_codes_are_no_store(self, owner):
        from allauth.mfa.recovery_codes.internal.auth import RecoveryCodes
        from allauth.mfa.totp.internal.auth import TOTP, generate_totp_secret

        TOTP.activate(owner, generate_totp_secret())
        RecoveryCodes.activate(owner)
        response = client_for(owner).get(reverse("mfa_view_recovery_codes"))
        assert no_store(response), (response.status_code, response.get("Cache-Control"))

    def test_api_answers_are_no_store(self, owner, workspace):
        _, raw = create_api_key(workspace=workspace, created_by=owner, name="cli")
        api = ApiClient(raw)
        for path in ("/billing/balance", "/clusters", "/workspaces"):
            api.get(path)
            assert no_store(api.last), path
        api.key = "rc_live_wrong"
        api.get("/clusters")
        assert api.last.status_code == 401 and no_store(api.last)

    def test_static_files_keep_their_own_caching(self, client):
        response = client.get("/static/js/app.js")
        assert response.status_code == 200 and not no_store(response)


class TestMoneyIsTypedInAsciiDigits:
    @pytest.mark.parametrize("typed", ["١٢", "１２", "12\u0663", "1e3", "NaN", "-5", "12.5.0", ""])
    def test_other_digits_and_notations_are_not_amounts(self, typed):
        assert parse_amount(typed) is None

    @pytest.mark.parametrize("typed, amount", [("12", "12"), ("$1,250.50", "1250.50"), (" 7.5 ", "7.5"), (".5", ".5")])
    def test_plain_amounts_are(self, typed, amount):
        assert parse_amount(typed) == Decimal(amount)

    def test_a_budget_in_arabic_indic_digits_is_refused(self, owner, environment):
        before = environment.monthly_budget
        response = client_for(owner).post(reverse("accounts:environment_budget", args=[environment.pk]),
                                          {"monthly_budget": "١٢"}, follow=True)
        assert "Enter a budget" in response.text
        environment.refresh_from_db()
        assert environment.monthly_budget == before

    def test_a_new_environments_budget_in_full_width_digits_is_a_field_error(self, owner, workspace):
        response = client_for(owner).post(reverse("accounts:environments"), {"name": "wide", "monthly_budget": "５０"})
        assert response.status_code == 200 and "digits 0-9" in response.text
        assert not Environment.objects.filter(name="wide").exists()

    def test_a_development_top_up_in_other_digits_credits_nothing(self, settings, owner, workspace):
        settings.DEBUG = True
        settings.STRIPE_SECRET_KEY = ""
        response = client_for(owner).post(reverse("billing:dev_top_up"), {"amount": "٥٠"})
        assert response.status_code == 404
        assert not LedgerEntry.objects.filter(workspace=workspace).exists()

    def test_an_auto_recharge_in_other_digits_is_refused(self, owner, workspace):
        client_for(owner).post(reverse("billing:auto_recharge"), {"enabled": "on", "threshold": "١٠", "amount": "٥٠"})
        assert not AutoRecharge.objects.filter(workspace=workspace, enabled=True).exists()


class TestInstancesHonourTheEnvironment:
    def test_x_environment_lists_that_environments_machines_only(self, owner, workspace, environment, machine_type):
        staging = Environment.objects.create(workspace=workspace, name="staging")
        make_cluster(environment, machine_type, name="prod-one")
        make_cluster(staging, machine_type_with_hosts(3), name="stage-one", machines=3)
        _, raw = create_api_key(workspace=workspace, created_by=owner, name="cli")

        status, body = ApiClient(raw, environment="staging").get("/instances")
        assert status == 200
        assert {i["cluster_name"] for i in body["data"]} == {"stage-one"} and body["meta"]["total"] == 3
        status, body = ApiClient(raw, environment=str(environment.pk)).get("/instances")
        assert {i["cluster_name"] for i in body["data"]} == {"prod-one"}
        status, body = ApiClient(raw).get("/instances")  # no header: the whole workspace
        assert body["meta"]["total"] == 5

    def test_an_unknown_environment_is_404(self, owner, workspace):
        _, raw = create_api_key(workspace=workspace, created_by=owner, name="cli")
        assert ApiClient(raw, environment="nowhere").get("/instances")[0] == 404
