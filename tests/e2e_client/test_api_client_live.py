"""The SDK (runcrate_client.Client) against the real API on a live server."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import override_settings

from accounts.models import Environment, Workspace
from clusters.models import Cluster
from runcrate_client import ApiError, Client, TransportError
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)


def test_lists_come_back_as_pages_and_iterate_follows_offsets(api_client, environment):
    for index in range(3):
        api_client.clusters.create(name=f"c{index}", offer_id=str(machine_type_with_hosts(2).pk), machines=2)
    page = api_client.clusters.list(limit=2)
    assert (len(page), page.total, page.limit) == (2, 3, 2)
    assert [c["name"] for c in api_client.iterate("/clusters", page_size=1)] == ["c2", "c1", "c0"]


def test_the_environment_header_picks_the_environment(live_server, dashboard_key, workspace, instant_offer):
    Environment.objects.create(workspace=workspace, name="staging")
    with Client(live_server.url, dashboard_key, environment="staging") as staging:
        staging.clusters.create(name="s", offer_id=str(instant_offer.pk), machines=2)
    assert Cluster.objects.get().environment.name == "staging"


def test_a_retried_create_with_the_same_idempotency_key_returns_the_first_cluster(api_client, instant_offer):
    first = api_client.clusters.create(name="once", offer_id=str(instant_offer.pk), machines=2, idempotency_key="k-1")
    again = api_client.clusters.create(name="once", offer_id=str(instant_offer.pk), machines=2, idempotency_key="k-1")
    assert again["id"] == first["id"] and Cluster.objects.count() == 1


def test_api_errors_carry_status_code_and_details(api_client, instant_offer, workspace):
    with pytest.raises(ApiError) as invalid:
        api_client.clusters.create(name="Bad Name", offer_id=str(instant_offer.pk), machines=2)
    assert invalid.value.status == 400 and "name" in invalid.value.details
    assert str(invalid.value).count("lowercase letters") == 1  # the message and the field say the same: once
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("9.00"))
    with pytest.raises(ApiError) as broke:
        api_client.clusters.create(name="broke", offer_id=str(instant_offer.pk), machines=2)
    assert broke.value.status == 402 and "required $10.00, available $9.00" in str(broke.value)
    with pytest.raises(ApiError) as refused:
        api_client.clusters.terminate_node("999999", "node-1")
    assert refused.value.status == 404


@override_settings(API_RATE_LIMIT=2, API_RATE_WINDOW_SECONDS=60)
def test_429_keeps_retry_after(api_client):
    api_client.catalogue.list_gpu_types()
    api_client.catalogue.list_gpu_types()
    with pytest.raises(ApiError) as limited:
        api_client.catalogue.list_gpu_types()
    assert limited.value.status == 429 and "retry after 60s" in str(limited.value)


def test_bad_keys_and_no_server_and_not_the_api(live_server):
    with Client(live_server.url, "rc_live_wrong") as client, pytest.raises(ApiError) as wrong:
        client.clusters.list()
    assert wrong.value.status == 401
    with Client("http://127.0.0.1:9", "rc_live_x") as client, pytest.raises(TransportError):
        client.clusters.list()
    with Client(live_server.url + "/nothing", "rc_live_x") as client, pytest.raises(TransportError):
        client.clusters.list()
