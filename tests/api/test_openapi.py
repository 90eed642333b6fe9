"""The schema describes the API: schemathesis sends generated requests to every operation and
checks there is no server error and every answer matches the schema (status, content type, body)."""

from __future__ import annotations

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
    case.call_and_validate(headers=bearer, checks=CHECKS)


def test_the_schema_is_openapi_3_1_and_covers_every_endpoint(client):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    spec = response.json()
    assert spec["openapi"] == "3.1.0"
    assert set(spec["paths"]) == {
        "/api/v1/gpu-types", "/api/v1/cluster-offers", "/api/v1/clusters", "/api/v1/clusters/{cluster_id}",
        "/api/v1/clusters/{cluster_id}/events", "/api/v1/clusters/{cluster_id}/retry-install",
        "/api/v1/clusters/{cluster_id}/workers", "/api/v1/clusters/{cluster_id}/nodes/{node_name}",
        "/api/v1/billing/balance", "/api/v1/billing/usage", "/api/v1/quotes",
        "/api/v1/volumes", "/api/v1/volumes/{volume_id}",
    }


def test_the_docs_page_renders_every_operation_without_any_cdn(client):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    html = response.content.decode()
    for path in api_schema()["paths"]:
        assert path in html
    assert "price_per_cluster_hour" in html
    assert "<script" not in html and "https://" not in html
