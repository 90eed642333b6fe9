"""Request a quote: the public page, its checks, and the two emails it sends."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.cache import cache
from django.urls import reverse
from django.utils import timezone

from notifications.models import Delivery
from quotes import services
from quotes.models import QuoteRequest, QuoteStatus
from tests.notifications.conftest import subject_of, text_of

pytestmark = pytest.mark.django_db(transaction=True)

URL = "/quote/"


@pytest.fixture(autouse=True)
def fresh_rate_limit():
    cache.clear()  # the test cache is per-process memory (see settings), never Redis
    yield
    cache.clear()


def valid(**overrides) -> dict:
    data = {
        "contact_name": "Grace Hopper", "email": "grace@example.org", "company": "Compilers Inc",
        "gpu": "H100", "machines": "128", "network": "infiniband", "term": "reserved", "term_months": "12",
        "start_date": (timezone.now().date() + dt.timedelta(days=30)).isoformat(), "notes": "Training run\nfor 3 months",
        "website": "",
    }
    data.update(overrides)
    return data


def test_the_page_is_public(client):
    response = client.get(URL)
    assert response.status_code == 200
    assert b"Request a quote" in response.content
    assert b'name="website"' in response.content


def test_the_dashboard_link_prefills_gpu_and_machines(owner_client, workspace):
    response = owner_client.get(URL + "?gpu=H200&machines=96&network=roce")
    form = response.context["form"]
    assert form["gpu"].value() == "H200" and str(form["machines"].value()) == "96" and form["network"].value() == "roce"
    assert form["email"].value() == "alice@example.com"
    assert form["company"].value() == workspace.name


def test_a_valid_request_is_stored_and_emailed_to_sales_and_confirmed_to_the_requester(client, smtp, settings):
    settings.SALES_EMAIL = "sales@runcrate.test"
    response = client.post(URL, valid(), REMOTE_ADDR="203.0.113.7")
    assert response.status_code == 302 and response["Location"] == reverse("quotes:thanks")
    quote = QuoteRequest.objects.get()
    assert (quote.machines, quote.network, quote.term, quote.term_months) == (128, "infiniband", "reserved", 12)
    assert quote.status == QuoteStatus.NEW and quote.source_ip == "203.0.113.7"

    [to_sales] = smtp.inbox.to("sales@runcrate.test")
    assert subject_of(to_sales) == "Quote request: 128 × H100 from Compilers Inc"
    assert to_sales["Reply-To"] == "grace@example.org"
    sales_text = text_of(to_sales)
    assert "InfiniBand" in sales_text and "Reserved for 12 months" in sales_text and "Training run" in sales_text
    assert f"https://clusters.example.test/admin/quotes/quoterequest/{quote.pk}/change/" in sales_text

    [confirmation] = smtp.inbox.to("grace@example.org")
    assert subject_of(confirmation) == "We received your quote request"
    assert confirmation["Reply-To"] == "sales@runcrate.test"
    text = text_of(confirmation)
    assert "Thank you, Grace Hopper" in text and "Machines:     128" in text
    assert len(smtp.messages) == 2


def test_any_number_of_machines_beyond_64_is_fine_and_on_demand_needs_no_months(client, smtp):
    response = client.post(URL, valid(machines="5000", term="on_demand", term_months="7", start_date=""))
    assert response.status_code == 302
    quote = QuoteRequest.objects.get()
    assert quote.machines == 5000 and quote.term_months is None and quote.start_date is None
    assert "As soon as possible" in text_of(smtp.inbox.to("grace@example.org")[0])


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"email": "not-an-email"}, "email", "valid email"),
        ({"contact_name": ""}, "contact_name", "required"),
        ({"machines": "0"}, "machines", "at least one machine"),
        ({"machines": "lots"}, "machines", "whole number"),
        ({"network": "carrier-pigeon"}, "network", "valid choice"),
        ({"term": "reserved", "term_months": ""}, "term_months", "how many months"),
        ({"term_months": "99"}, "term_months", "up to 60 months"),
        ({"start_date": "2001-01-01"}, "start_date", "in the past"),
    ],
)
def test_bad_input_gets_field_errors_and_nothing_is_stored(client, overrides, field, message):
    response = client.post(URL, valid(**overrides))
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field])
    assert message.encode() in response.content
    assert not QuoteRequest.objects.exists() and not Delivery.objects.exists()


def test_the_honeypot_pretends_success_but_stores_and_sends_nothing(client, smtp):
    response = client.post(URL, valid(website="https://spam.example"))
    assert response.status_code == 302
    assert not QuoteRequest.objects.exists()
    assert smtp.messages == []


def test_the_rate_limit_is_per_address(client, settings):
    settings.QUOTE_RATE_LIMIT = 2
    for _ in range(2):
        assert client.post(URL, valid(), REMOTE_ADDR="198.51.100.1").status_code == 302
    blocked = client.post(URL, valid(), REMOTE_ADDR="198.51.100.1")
    assert blocked.status_code == 429 and b"Too many quote requests" in blocked.content
    assert QuoteRequest.objects.count() == 2
    assert client.post(URL, valid(), REMOTE_ADDR="198.51.100.2").status_code == 302
    assert QuoteRequest.objects.count() == 3


def test_the_service_validates_like_the_page(db):
    with pytest.raises(services.InvalidQuoteRequest) as exc:
        services.create_quote_request(contact_name="A", email="bad", gpu="H100", machines=-1, network="ethernet", term="reserved")
    assert set(exc.value.errors) == {"email", "machines", "term_months"}


def test_the_service_takes_api_values(db):
    quote = services.create_quote_request(
        contact_name="Ada", email="ada@example.org", company="", gpu="A100", machines=65, network="roce",
        term="reserved", term_months=6, start_date=timezone.now().date() + dt.timedelta(days=3), notes="",
    )
    assert quote.term_label == "Reserved for 6 months" and quote.network == "roce"
    assert sorted(Delivery.objects.values_list("email", flat=True)) == ["ada@example.org", "sales@runcrate.example"]


def test_sales_sees_requests_with_a_status_in_the_admin(admin_client, db):
    quote = services.create_quote_request(contact_name="Ada", email="ada@example.org", gpu="A100", machines=65)
    response = admin_client.get(reverse("admin:quotes_quoterequest_changelist"))
    assert response.status_code == 200 and b"ada@example.org" in response.content and b"New" in response.content
    admin_client.post(
        reverse("admin:quotes_quoterequest_changelist"),
        {"form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-0-id": str(quote.pk), "form-0-status": "contacted", "_save": "Save"},
    )
    quote.refresh_from_db()
    assert quote.status == QuoteStatus.CONTACTED


def test_the_offers_page_links_to_a_prefilled_quote(owner_client, machine_type):
    response = owner_client.get("/offers/?gpu=H100&machines=8")
    assert b'href="/quote/?gpu=H100&amp;machines=8"' in response.content
