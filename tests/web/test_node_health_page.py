"""Node health on the cluster page and in its live pushes: a badge and what was found per
node, in words, and a banner with the way forward while a node is bad."""

from __future__ import annotations

import pytest

from clusters import live
from clusters.models import Cluster, NodeHealth
from clusters.node_health import rounds
from clusters.services.terminate import terminate_cluster
from offers import lab
from offers.models import Host, HostFault
from tests.factories import ready_cluster

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cluster(environment, machine_type, owner) -> Cluster:
    return ready_cluster(environment, machine_type, owner)


def break_node(cluster: Cluster, index: int) -> None:
    lab.inject(Host.objects.filter(nodes__cluster=cluster, nodes__index=index), fault=HostFault.NEVER_JOINS)
    rounds.check_cluster(cluster.pk)


def test_before_the_first_check_the_page_shows_no_health_and_no_banner(member_client, cluster):
    text = member_client.get(cluster.get_absolute_url()).text
    assert "<th>Health</th>" in text and 'data-testid="health-banner"' not in text
    assert "Healthy" not in text


def test_every_member_sees_each_nodes_health_in_words_and_a_banner_for_the_bad_one(member_client, cluster):
    break_node(cluster, 2)
    text = member_client.get(cluster.get_absolute_url()).text
    assert text.count('class="health health-healthy"') == 2
    assert '<span class="health health-network_down"' in text and "Private network down</span>" in text
    assert 'data-testid="health-banner"' in text
    assert "node-2 is private network down</strong> since" in text and "wg0 is down" in text
    assert "replace that machine or terminate the cluster" in text


def test_an_outsider_cannot_see_the_page(outsider_client, cluster):
    break_node(cluster, 1)
    assert outsider_client.get(cluster.get_absolute_url()).status_code == 404


def test_the_push_after_a_round_carries_the_row_whose_health_changed_alone_and_the_banner(cluster):
    rounds.check_cluster(cluster.pk)  # every node healthy, and the page shows it
    page = live.PageState()
    live.render_cluster_now(cluster.pk, page)
    break_node(cluster, 1)
    changed = list(cluster.nodes.filter(health=NodeHealth.NETWORK_DOWN).values_list("pk", flat=True))
    card, rows = live.render_cluster_changes(cluster.pk, changed, page)
    assert 'id="health-banner"' in card and "node-1 is private network down" in card
    assert rows.startswith('<tr id="node-1" hx-swap-oob="true">') and "Private network down" in rows
    assert rows.count("<tr ") == 1


def test_a_cluster_that_is_no_longer_ready_shows_no_health(member_client, cluster):
    break_node(cluster, 1)
    terminate_cluster(cluster)
    text = member_client.get(cluster.get_absolute_url()).text
    assert 'data-testid="health-banner"' not in text and "health-network_down" not in text
