"""The API client against a real local HTTP server answering in the contract's format."""

from __future__ import annotations

import json

import pytest
from fake_api import DEACTIVATED_KEY, VALID_KEY, FakeApi

from runcrate_client.api import ApiError, RuncrateClient, TransportError


@pytest.fixture
def client(fake_api: FakeApi):
    with RuncrateClient(VALID_KEY, fake_api.url, environment="staging", timeout=5) as client:
        yield client


def test_it_sends_the_key_and_the_environment(client: RuncrateClient, fake_api: FakeApi) -> None:
    client.list_gpu_types()
    headers = fake_api.state.requests[-1]["headers"]
    assert headers["Authorization"] == f"Bearer {VALID_KEY}"
    assert headers["X-Environment"] == "staging"


def test_lists_come_back_as_pages(client: RuncrateClient) -> None:
    page = client.list_cluster_offers(gpu="H100", machines=4)
    assert page.total == len(page.items) == 2
    assert all(not offer["community"] for offer in page)
    assert len(client.list_cluster_offers(gpu="H100", machines=4, include_community=True)) == 3


def test_iterate_follows_offsets_to_the_end(client: RuncrateClient) -> None:
    for i in range(5):
        client.create_cluster(f"c{i}", "off_h100_ct", 2)
    assert len(list(client.iterate("/clusters", page_size=2))) == 5


def test_create_sends_the_idempotency_key_and_a_retry_returns_the_first_cluster(
    client: RuncrateClient, fake_api: FakeApi
) -> None:
    first = client.create_cluster("train", "off_h100_vm", 2, "slurm", ssh_key_ids=["k1"], idempotency_key="abc")
    again = client.create_cluster("train", "off_h100_vm", 2, "slurm", ssh_key_ids=["k1"], idempotency_key="abc")
    assert first["id"] == again["id"]
    request = fake_api.state.requests[-1]
    assert request["headers"]["Idempotency-Key"] == "abc"
    assert json.loads(request["body"]) == {"name": "train", "offer_id": "off_h100_vm", "machines": 2,
                                           "software": "slurm", "ssh_key_ids": ["k1"]}


def test_402_carries_required_and_available(client: RuncrateClient, fake_api: FakeApi) -> None:
    fake_api.state.balance = fake_api.state.balance.__class__("5.00")
    with pytest.raises(ApiError) as caught:
        client.create_cluster("big", "off_h100_ct", 2)
    error = caught.value
    assert (error.status, error.code) == (402, "insufficient_credits")
    assert error.details == {"required": "10.00", "available": "5.00"}
    assert "required $10.00, available $5.00" in str(error)


def test_400_names_the_fields(client: RuncrateClient) -> None:
    with pytest.raises(ApiError) as caught:
        client.create_cluster("", "nope", 1)
    assert caught.value.status == 400
    assert set(caught.value.details) == {"name", "machines", "offer_id"}
    assert "machines: Must be between 2 and 64." in str(caught.value)


def test_409_node_terminate_refused(client: RuncrateClient) -> None:
    cluster = client.create_cluster("c", "off_h100_ct", 2)
    with pytest.raises(ApiError) as caught:
        client.terminate_node(cluster["id"], "node-1")
    assert (caught.value.status, caught.value.code) == (409, "node_terminate_refused")


def test_429_keeps_retry_after(client: RuncrateClient, fake_api: FakeApi) -> None:
    fake_api.fail_next(429, "rate_limited", "Too many requests.")
    with pytest.raises(ApiError) as caught:
        client.list_clusters()
    assert caught.value.details["retry_after"] == "7"
    assert "retry after 7s" in str(caught.value)


@pytest.mark.parametrize("key", [DEACTIVATED_KEY, "rc_live_wrong"])
def test_bad_keys_answer_401(fake_api: FakeApi, key: str) -> None:
    with RuncrateClient(key, fake_api.url) as client, pytest.raises(ApiError) as caught:
        client.billing_balance()
    assert caught.value.status == 401


def test_an_unreachable_server_is_a_transport_error(fake_api: FakeApi) -> None:
    url = fake_api.url
    fake_api.stop()
    with RuncrateClient(VALID_KEY, url, timeout=2) as client, pytest.raises(TransportError, match="cannot reach"):
        client.billing_balance()


def test_a_server_that_is_not_the_api_is_a_transport_error(client: RuncrateClient, fake_api: FakeApi) -> None:
    fake_api.state.html_mode = True
    with pytest.raises(TransportError, match="not the Runcrate API's JSON"):
        client.billing_balance()
