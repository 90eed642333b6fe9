"""Every error page is the product's own, with the Content-Security-Policy header, under DEBUG
(`make run`) as in production: no URL patterns, tracebacks or settings for a tenant to read."""

from __future__ import annotations

import pytest
from django.core.exceptions import SuspiciousOperation
from django.test import Client
from django.urls import include, path

pytestmark = pytest.mark.django_db


def broken(request):
    raise RuntimeError("a bug with a secret detail")


def suspicious(request):
    raise SuspiciousOperation("a suspicious detail")


urlpatterns = [path("broken/", broken), path("suspicious/", suspicious), path("", include("config.urls"))]

TECHNICAL = ("URLconf", "Using the URLconf", "Traceback", "a bug with a secret detail", "a suspicious detail",
             "DEBUG = True", "Request Method", "SECRET_KEY", "Raised by")


def assert_product_page(response, status: int, says: str) -> None:
    body = response.content.decode()
    assert response.status_code == status
    assert says in body and "Runcrate" in body
    assert not [t for t in TECHNICAL if t in body], body[:2000]
    assert "script-src 'self'" in response["Content-Security-Policy"]


@pytest.fixture(params=[True, False], ids=["debug", "production"])
def debug(request, settings):
    settings.DEBUG = request.param
    return request.param


def test_a_url_nothing_matches_is_the_products_404(debug, owner_client):
    assert_product_page(owner_client.get("/no-such-page/"), 404, "Page not found")
    assert_product_page(Client().get("/clusters/nothing-here/"), 404, "Page not found")


def test_another_tenants_cluster_is_the_products_404(debug, owner_client):
    assert_product_page(owner_client.get("/clusters/987654/"), 404, "Page not found")


def test_a_forged_form_is_the_products_403(debug, owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    assert_product_page(client.post("/account/webhooks/", {"url": "http://127.0.0.1:9/x"}), 403, "expired")


@pytest.mark.urls(__name__)
def test_a_bug_is_the_products_500_and_the_log_keeps_the_traceback(debug, caplog):
    response = Client(raise_request_exception=False).get("/broken/")
    assert_product_page(response, 500, "Something went wrong on our side")
    assert "a bug with a secret detail" in caplog.text


@pytest.mark.urls(__name__)
def test_a_suspicious_request_is_the_products_400(debug):
    assert_product_page(Client(raise_request_exception=False).get("/suspicious/"), 400, "could not be understood")


@pytest.mark.django_db
def test_favicon_ico_is_the_products_icon_not_a_404():
    from django.contrib.staticfiles import finders

    response = Client().get("/favicon.ico")
    assert response.status_code == 302 and response["Location"].endswith("img/favicon.svg")
    assert finders.find("img/favicon.svg")
