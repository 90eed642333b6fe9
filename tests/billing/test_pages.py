"""The Billing page and its partials: Owners and Managers only; usage lines equal their rows."""

from __future__ import annotations

import csv
import io
from decimal import Decimal

import pytest
from django.urls import reverse

from billing import services as billing
from billing.models import LedgerEntry
from tests.billing.conftest import at, client_for, running_cluster

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
MONTH = "?month=2026-03"


@pytest.fixture
def billed(environment, machine_type):
    cluster = running_cluster(environment, machine_type, machines=3, name="llama")
    billing.meter_usage(at(5400))
    return cluster


def pages(cluster_id: int) -> list[tuple[str, dict[str, str]]]:
    return [
        (reverse("billing:overview") + MONTH, {}),
        (reverse("billing:usage_detail", args=[cluster_id]) + MONTH, {}),
        (reverse("billing:usage_detail", args=[cluster_id]) + MONTH, HTMX),
        (reverse("billing:export_csv") + MONTH, {}),
    ]


@pytest.mark.parametrize("role", ["owner", "manager"])
def test_owners_and_managers_see_every_billing_page_and_partial(request, billed, role):
    client = client_for(request.getfixturevalue(role))
    for url, headers in pages(billed.pk):
        assert client.get(url, headers=headers).status_code == 200, url


def test_developers_are_told_their_role_does_not_allow_billing_on_every_page_partial_and_action(developer, billed):
    client = client_for(developer)
    for url, headers in pages(billed.pk):
        response = client.get(url, headers=headers)
        assert response.status_code == 403, url
        if not headers:
            assert "Your role in this workspace does not allow this" in response.content.decode(), url
    for name in ("top_up", "dev_top_up", "auto_recharge", "save_card"):
        assert client.post(reverse(f"billing:{name}"), {"amount": "50"}).status_code == 403, name


def test_an_outsider_sees_only_their_own_workspace(outsider, billed):
    # The outsider owns another workspace: their billing pages work and never show ours.
    client = client_for(outsider)
    overview, detail, partial, export = pages(billed.pk)
    for url, headers in (detail, partial):
        assert client.get(url, headers=headers).status_code == 404, url
    for url, _ in (overview, export):
        response = client.get(url)
        assert response.status_code == 200 and "llama" not in response.content.decode()


def test_anonymous_users_are_sent_to_log_in(client, billed):
    response = client.get(reverse("billing:overview"))
    assert response.status_code == 302 and reverse("login") in response["Location"]


def test_the_page_shows_one_line_per_cluster_that_opens_by_htmx_with_an_href(owner, billed):
    page = client_for(owner).get(reverse("billing:overview") + MONTH).content.decode()
    detail = reverse("billing:usage_detail", args=[billed.pk]) + MONTH
    assert page.count("Cluster usage llama") == 1
    assert f'href="{detail}"' in page and f'hx-get="{detail}"' in page
    assert "−$11.25" in page  # 3 machines × $2.50 × 1.5 h
    assert "<svg" in page and "<rect" in page


def test_the_machine_rows_sum_to_the_line(owner, billed):
    partial = client_for(owner).get(reverse("billing:usage_detail", args=[billed.pk]) + MONTH, headers=HTMX)
    html = partial.content.decode()
    assert "<html" not in html  # a fragment
    assert html.count('class="machine-row"') == 3
    assert html.count("$3.75") == 3 and "$11.25" in html


def test_another_workspaces_cluster_is_a_404(owner, outsider, machine_type):
    from accounts.models import Membership

    foreign_env = Membership.objects.get(user=outsider).workspace.default_environment
    foreign = running_cluster(foreign_env, machine_type, name="secret")
    billing.meter_usage(at(3600))
    response = client_for(owner).get(reverse("billing:usage_detail", args=[foreign.pk]) + MONTH)
    assert response.status_code == 404


def test_the_csv_export_lists_lines_and_machines(owner, billed):
    body = client_for(owner).get(reverse("billing:export_csv") + MONTH).content.decode()
    rows = list(csv.DictReader(io.StringIO(body)))
    assert [r["type"] for r in rows] == ["usage", "machine", "machine", "machine"]
    assert rows[0]["amount"] == "-11.25"
    assert sum(Decimal(r["amount"]) for r in rows[1:]) == Decimal("-11.25")


def test_a_bad_month_is_a_404(owner, billed):
    assert client_for(owner).get(reverse("billing:overview") + "?month=soon").status_code == 404


def test_the_top_bar_shows_the_time_left_at_the_current_spend(owner, developer, billed):
    # $1000 − $11.25 at 3 × $2.50/h = 131.8 hours.
    for user in (owner, developer):
        page = client_for(user).get(reverse("clusters:list")).content.decode()
        assert 'id="runway"' in page and "131.8 h left at $7.50/h" in page


def test_a_development_top_up_works_for_any_workspace_only_with_debug_and_no_keys(settings, workspace, owner):
    client = client_for(owner)
    settings.DEBUG, settings.STRIPE_SECRET_KEY = True, ""
    assert "Development only" in client.get(reverse("billing:overview")).content.decode()
    assert client.post(reverse("billing:dev_top_up"), {"amount": "50"}).status_code == 302
    assert LedgerEntry.objects.get(workspace=workspace).amount == Decimal("50.00")
    settings.STRIPE_SECRET_KEY = "sk_test_x"
    assert client.post(reverse("billing:dev_top_up"), {"amount": "50"}).status_code == 404
    settings.STRIPE_SECRET_KEY, settings.DEBUG = "", False
    assert client.post(reverse("billing:dev_top_up"), {"amount": "50"}).status_code == 404
    assert LedgerEntry.objects.filter(workspace=workspace).count() == 1
    workspace.refresh_from_db()
    assert workspace.credit_balance == Decimal("1050.00")


def test_the_spend_chart_draws_no_cumulative_line_into_days_to_come():
    import datetime as dt

    from billing.views import _spend_chart

    days = [(dt.date(2026, 3, d), Decimal("5.00")) for d in range(1, 32)]
    chart = _spend_chart(days, today=dt.date(2026, 3, 10))
    assert len(chart["bars"]) == 31 and len(chart["line"].split()) == 10
    assert len(_spend_chart(days, today=dt.date(2026, 4, 2))["line"].split()) == 31


def test_emails_link_to_the_port_make_run_serves_on():
    from config.stack import site_environment

    assert site_environment({}, "127.0.0.1", 8106)["SITE_URL"] == "http://127.0.0.1:8106"
    assert site_environment({"SITE_URL": "https://clusters.example"}, "127.0.0.1", 8106)["SITE_URL"] == "https://clusters.example"


def test_a_clusters_total_cost_is_its_billing_line_csv_and_api_amount_to_the_cent(owner, workspace, environment,
                                                                                    machine_type):
    # Two machines at $2.50/h for 3,333.6 s accrue $2.315 each: the ledger posts $2.32 per
    # machine ($4.64); the exact total rounded once would read $4.63.
    from api.keys import create_api_key
    from clusters.models import Cluster, Status
    from tests.api.conftest import ApiClient

    cluster = running_cluster(environment, machine_type, machines=2, name="pennies")
    billing.end_usage(cluster, at(3333.6))
    Cluster.objects.filter(pk=cluster.pk).update(status=Status.TERMINATED, billing_ended_at=at(3333.6))
    billing.meter_usage(at(4000))
    client = client_for(owner)

    page = client.get(cluster.get_absolute_url()).content.decode()
    line = client.get(reverse("billing:overview") + MONTH).content.decode()
    rows = list(csv.DictReader(io.StringIO(client.get(reverse("billing:export_csv") + MONTH).content.decode())))
    api = ApiClient(create_api_key(workspace=workspace, created_by=owner, name="k")[1])
    status, usage = api.get("/billing/usage", month="2026-03")

    assert ">$4.64</strong>" in page and "Total cost" in page
    assert "−$4.64" in line
    assert rows[0]["amount"] == "-4.64"
    assert status == 200 and [item["amount"] for item in usage["data"]] == ["4.64"]
    assert usage["meta"]["total_amount"] == "4.64"
    assert -sum(e.amount for e in LedgerEntry.objects.filter(cluster=cluster)) == Decimal("4.64")


def test_an_environment_past_its_budget_shows_how_far_past(owner, environment, billed):
    # 3 machines × 1.5 h at $2.50: $11.25 spent against a $9.45 budget is 119 %, not 100 %.
    environment.monthly_budget = Decimal("9.45")
    environment.save()
    page = client_for(owner).get(reverse("billing:overview") + MONTH).content.decode()
    assert "119%" in page and ">100%<" not in page
