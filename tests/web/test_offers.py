"""The offers page: only offers that can start now for that size, community on request."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import reverse

from offers.models import Host
from tests.factories import GPUModelFactory, LocationFactory, machine_type_with_hosts
from tests.web.conftest import HTMX

pytestmark = pytest.mark.django_db

URL = reverse("offers:list")


@pytest.fixture
def community_type(db):
    return machine_type_with_hosts(
        6, community=True, price_per_machine_hour=Decimal("1.25"),
        location=LocationFactory(code="community-global", name="Community hosts", country="ZZ"),
    )


def configure_link(machine_type, machines: int, *, community: bool = False) -> str:
    opted = "&include_community=on" if community else ""
    return f"{reverse('clusters:create')}?offer={machine_type.pk}&machines={machines}{opted}\""


def test_it_shows_whole_cluster_price_with_the_machine_price_under_it(member_client, machine_type):
    response = member_client.get(URL, {"gpu": "H100", "machines": 4})
    assert response.status_code == 200
    assert '<strong class="cluster-price">$10.00/h</strong>' in response.text
    assert '<small class="machine-price">$2.50/h per machine × 4</small>' in response.text
    assert configure_link(machine_type, 4) in response.text


def test_it_lists_only_offers_that_can_start_that_size_now(member_client, machine_type):
    small = machine_type_with_hosts(3, price_per_machine_hour=Decimal("3.00"))
    Host.objects.filter(pk=machine_type.hosts.order_by("id").first().pk).update(state=Host.State.RESERVED)
    text = member_client.get(URL, {"gpu": "H100", "machines": 4}).text
    assert configure_link(machine_type, 4) in text and "5 machines free" in text
    assert configure_link(small, 4) not in text
    assert configure_link(small, 3) in member_client.get(URL, {"gpu": "H100", "machines": 3}).text


def test_it_lists_only_the_picked_gpu(member_client, machine_type):
    a100 = machine_type_with_hosts(6, gpu=GPUModelFactory(slug="A100", name="NVIDIA A100", memory_gb=40))
    text = member_client.get(URL, {"gpu": "A100", "machines": 2}).text
    assert configure_link(a100, 2) in text and configure_link(machine_type, 2) not in text


def test_it_leaves_out_community_offers_unless_asked(member_client, machine_type, community_type):
    text = member_client.get(URL, {"gpu": "H100", "machines": 4}).text
    assert configure_link(community_type, 4) not in text
    assert "independent operators" not in text


def test_with_community_included_it_warns(member_client, machine_type, community_type):
    text = member_client.get(URL, {"gpu": "H100", "machines": 4, "include_community": "on"}).text
    assert configure_link(community_type, 4, community=True) in text
    assert "Community hosts are run by independent operators: keep secrets off them." in text
    assert '<span class="badge warn">Community</span>' in text
    # Cheapest whole cluster first.
    assert text.index(configure_link(community_type, 4, community=True)) < text.index(configure_link(machine_type, 4, community=True))


def test_it_says_when_nothing_can_start(member_client, machine_type):
    text = member_client.get(URL, {"gpu": "H100", "machines": 7}).text
    assert "No offer can start 7 × H100 now" in text
    assert "Request a quote" in text


@pytest.mark.parametrize("machines", [1, 65])
def test_it_refuses_a_count_outside_2_to_64(member_client, machine_type, machines):
    text = member_client.get(URL, {"gpu": "H100", "machines": machines}).text
    assert 'class="field-error"' in text
    assert configure_link(machine_type, machines) not in text


def test_the_results_swap_in_over_htmx(member_client, machine_type):
    response = member_client.get(URL, {"gpu": "H100", "machines": 2}, **HTMX)
    assert response.status_code == 200
    assert response.text.lstrip().startswith('<section id="offer-results"')
    assert "<html" not in response.text
    assert configure_link(machine_type, 2) in response.text


def test_the_form_keeps_the_picked_values(member_client, machine_type):
    text = member_client.get(URL, {"gpu": "H100", "machines": 6, "include_community": "on"}).text
    assert 'value="6"' in text and "checked" in text


def test_an_outsider_sees_the_same_catalogue(outsider_client, machine_type):
    # The catalogue is public to every signed-in customer; only their balance differs.
    assert configure_link(machine_type, 4) in outsider_client.get(URL, {"gpu": "H100", "machines": 4}).text


def test_anonymous_is_sent_to_sign_in(client):
    assert client.get(URL).status_code == 302


@pytest.mark.parametrize("machines", [1, 65])
def test_over_htmx_a_count_outside_2_to_64_shows_its_error_in_the_results(member_client, machine_type, machines):
    text = member_client.get(URL, {"gpu": "H100", "machines": machines}, **HTMX).text
    assert 'class="field-error"' in text or 'role="alert"' in text
    assert "No offer can start" not in text


@pytest.mark.parametrize("machines, message", [
    ("65", "at most 64 machines"), ("1", "at least 2 machines"), ("", "Enter how many machines"),
    ("lots", "whole number of machines"),
])
def test_an_invalid_count_shows_its_message_and_no_prices(member_client, machine_type, machines, message):
    response = member_client.get(URL, {"gpu": "H100", "machines": machines}, **HTMX)
    assert response.status_code == 200
    assert message in response.text and 'role="alert"' in response.text
    assert "cluster-price" not in response.text and "Configure" not in response.text


def test_it_filters_by_location_and_kind_and_sorts_by_price(member_client, machine_type):
    frankfurt = LocationFactory(code="eu-central-1", name="Frankfurt, Germany", country="DE")
    container = machine_type_with_hosts(6, kind="container", price_per_machine_hour=Decimal("1.00"), location=frankfurt)
    dear = machine_type_with_hosts(6, price_per_machine_hour=Decimal("9.00"))
    text = member_client.get(URL, {"gpu": "H100", "machines": 2, "kind": "container"}).text
    assert configure_link(container, 2) in text and configure_link(machine_type, 2) not in text
    text = member_client.get(URL, {"gpu": "H100", "machines": 2, "location": "us-east-1"}).text
    assert configure_link(machine_type, 2) in text and configure_link(container, 2) not in text
    text = member_client.get(URL, {"gpu": "H100", "machines": 2, "sort": "-price"}).text
    assert text.index(configure_link(dear, 2)) < text.index(configure_link(machine_type, 2)) < text.index(
        configure_link(container, 2)
    )


def test_each_offer_shows_its_machine_and_the_network_a_cluster_gets(member_client, db):
    machine_type_with_hosts(4, kind="container", vcpus=48, memory_gb=512, disk_gb=3800, interconnect="eth_25g")
    text = member_client.get(URL, {"gpu": "H100", "machines": 2}).text
    assert "48 vCPU · 512 GB RAM · 3,800 GB disk · 25 Gb Ethernet link per machine" in text
    assert "Encrypted private network, about 1–2 Gbit/s between machines" in text
    assert "No Kubernetes on containers" in text and "No shared folder" in text
    assert "not training a full model across machines" in text
    assert "InfiniBand 3200" not in text and "RoCE 400" not in text


def test_the_demo_catalogue_sells_no_infiniband_or_roce_self_serve():
    from offers.catalogue import MACHINE_TYPES

    assert {row[4] for row in MACHINE_TYPES} <= {"eth_10g", "eth_25g", "eth_100g"}


def test_the_database_refuses_an_infiniband_self_serve_offer(db):
    from django.db import IntegrityError, transaction

    with pytest.raises(IntegrityError), transaction.atomic():
        machine_type_with_hosts(1, interconnect="infiniband")
