"""Bad input is a 4xx with the error envelope, never a 5xx."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.api.conftest import error_of

pytestmark = pytest.mark.django_db


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=10_000)
def test_a_body_over_the_size_limit_is_413(api):
    response = api.client.post("/api/v1/clusters", data='{"name": "' + "x" * 20_000 + '"}',
                               content_type="application/json", headers=api.headers())
    assert response.status_code == 413
    assert error_of(response.json())["code"] == "body_too_large"


@pytest.mark.parametrize("depth", [40, 100_000])
def test_deeply_nested_json_is_400(api, depth):
    body = "[" * depth + "]" * depth
    response = api.client.post("/api/v1/clusters", data='{"name": ' + body + "}", content_type="application/json",
                               headers=api.headers())
    assert response.status_code == 400
    assert error_of(response.json())["code"] == "invalid_json"


def test_an_offset_beyond_bigint_is_400(api):
    status, body = api.get("/clusters", offset=2**63)
    assert status == 400 and "offset" in error_of(body)["details"]
    status, body = api.get("/clusters", offset=2**63 - 1)
    assert status == 200 and body["data"] == []


def test_nul_bytes_in_the_query_are_400(api):
    status, body = api.get("/cluster-offers", gpu="H1%0000")
    assert status == 400 and "gpu" in error_of(body)["details"]
    status, body = api.get("/billing/usage", month="2025-%0001")
    assert status == 400


def test_nul_bytes_in_a_body_are_400_on_their_field(api, machine_type):
    status, body = api.post("/clusters", {"name": "a\x00b", "offer_id": machine_type.pk, "machines": 2})
    assert status == 400 and "name" in error_of(body)["details"]


def test_an_id_beyond_bigint_in_a_body_is_400(api, machine_type):
    status, body = api.post("/clusters", {"name": "x", "offer_id": 2**64, "machines": 2})
    assert status == 400 and "offer_id" in error_of(body)["details"]


def test_a_nul_in_a_header_names_no_environment(api):
    status, body = api.call("GET", "/clusters", headers={"X-Environment": "de\x00fault"})
    assert status == 404 and error_of(body)["code"] == "environment_not_found"


def test_wrong_types_are_answered_in_the_products_words_not_pydantics(api):
    status, body = api.post("/clusters", {"name": "a", "offer_id": 1, "machines": "two", "ssh_key_ids": "x",
                                          "software": 5})
    assert status == 400
    details = body["error"]["details"]
    assert details["machines"] == ["Must be a whole number."]
    assert details["ssh_key_ids"] == ["Must be a list."] and details["software"] == ["Must be text."]
    assert "Input should" not in str(body)
