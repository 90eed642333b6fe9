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


def configure_link(machine_type, machines: int) -> str:
    return f"{reverse('clusters:create')}?offer={machine_type.pk}&machines={machines}\""


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
    assert configure_link(community_type, 4) in text
    assert "Community hosts are run by independent operators: keep secrets off them." in text
    assert '<span class="badge warn">Community</span>' in text
    # Cheapest whole cluster first.
    assert text.index(configure_link(community_type, 4)) < text.index(configure_link(machine_type, 4))


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
    assert response.text.lstrip().startswith('<section id="offer-results">')
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
