"""The SDK's endpoints are generated from the server's OpenAPI document: regenerating them from
the live schema must give the committed module, byte for byte. When this fails, an endpoint
changed on the server: run `python -m runcrate_client.codegen <openapi.json> > runcrate_client/endpoints.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from runcrate_client import Client, codegen, endpoints

COMMITTED = Path(endpoints.__file__)


@pytest.fixture(scope="module")
def live_schema() -> dict:
    from api.pages import schema

    return schema()


def test_the_committed_endpoints_are_what_the_live_schema_generates(live_schema):
    generated = codegen.generate(live_schema)
    assert generated == COMMITTED.read_text(), (
        "runcrate_client/endpoints.py is stale: regenerate it with "
        "`python -m runcrate_client.codegen http://127.0.0.1:8000/api/v1/openapi.json > runcrate_client/endpoints.py`"
    )


def test_every_operation_is_a_method_of_the_client(live_schema):
    operation_ids = {op["operationId"] for op in codegen.operations(live_schema)}
    assert set(endpoints.OPERATIONS) == operation_ids
    client = Client("http://127.0.0.1:9", "rc_live_unused")
    for attribute, method in endpoints.OPERATIONS.values():
        assert callable(getattr(getattr(client, attribute), method))
    client.close()


def test_a_renamed_field_on_the_server_changes_the_generated_signature(live_schema):
    import copy

    changed = copy.deepcopy(live_schema)
    body = changed["components"]["schemas"]["CreateVolume"]["properties"]
    body["capacity_gb"] = body.pop("size_gb")
    assert "capacity_gb: int" in codegen.generate(changed)
    assert codegen.generate(changed) != COMMITTED.read_text()
