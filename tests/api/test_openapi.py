"""The schema describes the API: schemathesis sends generated requests to every operation and
checks there is no server error and every answer matches the schema (status, content type, body)."""

from __future__ import annotations

import re

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from api.keys import create_api_key
from api.pages import schema as api_schema
from tests.api.conftest import make_cluster

schema = schemathesis.openapi.from_dict(api_schema())
schema.app = get_wsgi_application()

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture
def keep_test_connection():
    """Django's own test client does this too: the WSGI handler's request signals would close the
    database connection, and with it the test's transaction (PostgreSQL; SQLite in memory ignores it)."""
    from django.core import signals
    from django.db import close_old_connections

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture
def bearer(keep_test_connection, owner, workspace, environment, machine_type) -> dict[str, str]:
    # Something to find: an offer, a cluster (id 1 on a fresh database), a key to act with.
    make_cluster(environment, machine_type)
    return {"Authorization": f"Bearer {create_api_key(workspace=workspace, created_by=owner, name='fuzz')[1]}"}


@pytest.mark.django_db
@schema.parametrize()
@settings(max_examples=8, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much])
def test_every_operation_answers_within_its_schema(case, bearer):
    # A generated X-Environment would only ever name no environment; let the default stand.
    if case.headers:
        case.headers.pop("X-Environment", None)
        case.headers.pop("X-Workspace", None)
    case.call_and_validate(headers=bearer, checks=CHECKS)


def api_routes() -> dict[str, set[str]]:
    """Every /api/v1 route of the URL configuration, with the methods it answers (from the
    Allow header of an OPTIONS request, which no endpoint accepts)."""
    from django.test import Client
    from django.urls import URLPattern, URLResolver, get_resolver

    def walk(patterns, prefix=""):
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern)

    client, routes = Client(), {}
    for route in walk(get_resolver().url_patterns):
        # Left out: the schema and docs pages, ninja's root (it answers nothing) and the catch-all 404.
        if not route.startswith("api/v1/") or route.endswith(("openapi.json", "docs", "v1/")) or "(?P<rest>" in route:
            continue
        templated = "/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", route)
        concrete = "/" + re.sub(r"<(?:\w+:)?(\w+)>", "1", route)
        response = client.options(concrete)
        assert response.status_code == 405, (route, response.status_code)
        routes[templated] = {m.strip().lower() for m in response["Allow"].split(",")}
    return routes


def test_the_schema_is_openapi_3_1_and_describes_every_route_of_the_url_configuration(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    assert spec["openapi"] == "3.1.0"
    documented = {path: {m for m in item if m in ("get", "post", "put", "patch", "delete")}
                  for path, item in spec["paths"].items()}
    assert documented == api_routes()


def test_the_docs_page_renders_every_operation_without_any_cdn(client):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    html = response.content.decode()
    for path in api_schema()["paths"]:
        assert path in html
    assert "price_per_cluster_hour" in html
    assert "<script" not in html and "https://" not in html
