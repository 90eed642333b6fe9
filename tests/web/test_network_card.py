"""The cluster page's Network card: the node × node matrix, its slow cells, the button."""

from __future__ import annotations

import pytest
from django.urls import reverse

from clusters.models import NetworkTest
from clusters.network_test.node import PairMeasurement
from clusters.network_test.services import (
    claim_network_test,
    finish_network_test,
    record_network_pairs,
    start_network_test,
)
from tests.web.conftest import HTMX

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready(environment, machine_type, owner):
    from tests.api.conftest import drive, make_cluster

    cluster = make_cluster(environment, machine_type, machines=3)
    drive(cluster)
    assert cluster.status == "ready"
    return cluster


def test_a_member_starts_a_network_test_from_the_page(member_client, member, ready):
    response = member_client.post(reverse("clusters:network_test", args=[ready.pk]), **HTMX)
    assert response.status_code == 200 and response["HX-Redirect"] == ready.get_absolute_url()
    test = NetworkTest.objects.get()
    assert test.requested_by == member.username and test.status == "queued"
    text = member_client.get(ready.get_absolute_url()).text
    assert 'data-testid="network-test-status">Queued<' in text
    assert "Run network test" not in text, "one test at a time"
    # A second post is refused with a message, not an error page.
    response = member_client.post(reverse("clusters:network_test", args=[ready.pk]), follow=True)
    assert "still queued" in response.text


def test_an_outsider_cannot_start_one(outsider_client, ready):
    response = outsider_client.post(reverse("clusters:network_test", args=[ready.pk]))
    assert response.status_code == 404 and not NetworkTest.objects.exists()


def test_a_get_is_not_allowed(member_client, ready):
    assert member_client.get(reverse("clusters:network_test", args=[ready.pk])).status_code == 405


def test_a_cluster_not_ready_has_no_button_and_a_post_is_refused_with_a_message(member_client, environment, machine_type):
    from tests.api.conftest import make_cluster

    cluster = make_cluster(environment, machine_type)
    assert "Run network test" not in member_client.get(cluster.get_absolute_url()).text
    response = member_client.post(reverse("clusters:network_test", args=[cluster.pk]), follow=True)
    assert "can be tested" in response.text and not NetworkTest.objects.exists()


def test_the_matrix_shows_each_pair_with_slow_cells_marked_in_words(member_client, ready):
    claimed = claim_network_test(start_network_test(ready, actor="alice").pk)
    assert claimed is not None
    test = claimed
    record_network_pairs(test, [
        PairMeasurement("ring", "node-0", "node-1", 1.71, None), PairMeasurement("ring", "node-1", "node-2", 1.52, None),
        PairMeasurement("ring", "node-2", "node-0", 0.21, None),
    ])
    record_network_pairs(test, [PairMeasurement("pairs", "node-0", "node-1", 1.93, 0.42)])
    record_network_pairs(test, [PairMeasurement("pairs", "node-2", "node-0", 0.18, 0.61)])
    text = member_client.get(ready.get_absolute_url()).text
    assert 'data-testid="network-matrix"' in text and 'class="matrix-scroll"' in text
    ok_cell = text[text.index('data-testid="pair-node-0-node-1"'):]
    assert ok_cell.startswith('data-testid="pair-node-0-node-1">') and "<strong>1.93</strong>" in ok_cell[:200]
    assert "0.42 ms" in ok_cell[:300] and "slow" not in ok_cell[:300]
    slow_cell = text[text.index('data-testid="pair-node-2-node-0"'):]
    assert "<strong>0.18</strong>" in slow_cell[:200] and '<span class="cell-flag">slow</span>' in slow_cell[:300]
    pending = text[text.index('data-testid="pair-node-1-node-2"'):]
    assert "…" in pending[:120], "not measured yet"
    assert "5 of 9 measured" in text
    ring = text[text.index('data-testid="network-ring"'):]
    assert "node-2 → node-0: <strong>0.21</strong> Gbit/s" in ring and "slow" in ring
    finish_network_test(test)
    text = member_client.get(ready.get_absolute_url()).text
    assert 'data-testid="network-test-status">Slow pairs found<' in text and "Run network test" in text
    assert "2 slow pairs" in text


def test_earlier_runs_are_listed_with_their_summary(member_client, ready):
    for figure in (1.5, 0.4):
        test = start_network_test(ready, actor="alice")
        claim_network_test(test.pk)
        record_network_pairs(test, [PairMeasurement("ring", "node-0", "node-1", figure, None)])
        finish_network_test(test)
    text = member_client.get(ready.get_absolute_url()).text
    history = text[text.index("Earlier runs"):]
    assert "Passed" in history and "1.50–1.50 Gbit/s" in history


def test_pairs_whose_nodes_run_on_different_hosts_are_marked_across_hosts(member_client, ready):
    from offers.models import Host, PhysicalHost

    claimed = claim_network_test(start_network_test(ready, actor="alice").pk)
    assert claimed is not None
    record_network_pairs(claimed, [PairMeasurement("pairs", "node-0", "node-1", 1.93, 0.42),
                                   PairMeasurement("pairs", "node-0", "node-2", 1.12, 0.81)])
    before = member_client.get(ready.get_absolute_url()).text
    assert "across hosts" not in before, "one host: no pair crosses"

    servers = [PhysicalHost.objects.create(name=f"gpu-{i}", address=f"203.0.113.{i}", ssh_key_path="/k") for i in (1, 2)]
    for node in ready.nodes.all():
        Host.objects.filter(pk=node.host_id).update(physical_host=servers[node.index == 2])
    text = member_client.get(ready.get_absolute_url()).text

    assert 'data-testid="network-across-hosts"' in text
    def cell(pair: str) -> str:
        start = text.index(f'data-testid="pair-{pair}"')
        return text[start:text.index("</td>", start)]

    assert "across hosts" not in cell("node-0-node-1")
    assert '<small class="cell-across">across hosts</small>' in cell("node-0-node-2")
    assert "across hosts" in cell("node-2-node-1"), "marked before it is measured"
