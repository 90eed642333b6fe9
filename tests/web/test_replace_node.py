"""The Replace action on a cluster's page: who may use it, how it asks first, and how the swap shows."""

from __future__ import annotations

import pytest
from django.urls import reverse

from clusters import lifecycle
from clusters.models import Cluster, Node, NodeHealth
from offers.models import Host
from tests.web.conftest import HTMX

pytestmark = pytest.mark.django_db


@pytest.fixture
def ready(cluster) -> Cluster:
    for _ in range(5):
        if not lifecycle.advance(cluster.pk):
            break
    cluster.refresh_from_db()
    assert cluster.status == "ready"
    return cluster


def replace_url(cluster: Cluster, name: str) -> str:
    return reverse("clusters:replace_node", args=[cluster.pk, name])


def test_each_worker_row_offers_replace_behind_a_confirmation_and_the_head_none(member_client, ready):
    text = member_client.get(ready.get_absolute_url()).text
    for name in ("node-1", "node-2", "node-3"):
        assert f'action="{replace_url(ready, name)}"' in text
    assert replace_url(ready, "node-0") not in text
    assert text.count("hx-confirm=\"Replace node-") == 3
    assert "onclick" not in text


def test_an_unhealthy_node_has_the_replace_button_made_prominent(member_client, ready):
    Node.objects.filter(cluster=ready, index=2).update(health=NodeHealth.UNREACHABLE)
    text = member_client.get(ready.get_absolute_url()).text
    assert 'class="danger" data-testid="replace-node-2"' in text
    assert 'class="small" data-testid="replace-node-1"' in text


def test_replacing_shows_the_new_machine_beside_the_node_until_the_swap(member_client, ready):
    response = member_client.post(replace_url(ready, "node-2"), **HTMX)
    assert response.status_code == 200 and response["HX-Redirect"] == ready.get_absolute_url()
    text = member_client.get(ready.get_absolute_url()).text
    assert 'id="node-2"' in text and 'id="node-2-replacement"' in text
    assert "(replacement, pending)" in text and "(being replaced: runs until the new machine is ready)" in text
    assert "action=\"" + replace_url(ready, "node-1") + "\"" not in text, "one replacement at a time"
    assert "Replacing node-2" in text
    assert "Add worker(s)" not in text, "the service refuses adding workers during a swap"

    Node.objects.filter(cluster=ready, index=2, replacing__isnull=True).update(
        health=NodeHealth.SOFTWARE_DOWN, health_checked_at=ready.ready_at
    )
    for _ in range(5):
        if not lifecycle.advance(ready.pk):
            break
    text = member_client.get(ready.get_absolute_url()).text
    assert 'id="node-2-replacement"' not in text and "(replaced)" in text
    assert "Add worker(s)" in text
    # The stopped machine's last health is history, not news.
    assert NodeHealth.SOFTWARE_DOWN.label not in text


def test_no_free_machine_is_said_plainly(member_client, ready, machine_type):
    Host.objects.filter(machine_type=machine_type, state=Host.State.FREE).update(state=Host.State.DISABLED)
    response = member_client.post(replace_url(ready, "node-1"), follow=True)
    assert "can start now to replace node-1; node-1 keeps running" in response.text
    assert not Node.objects.filter(cluster=ready, replacing__isnull=False).exists()


def test_an_outsider_cannot_replace_and_an_unknown_node_is_404(outsider_client, member_client, ready):
    assert outsider_client.post(replace_url(ready, "node-1")).status_code == 404
    assert member_client.post(replace_url(ready, "node-9")).status_code == 404
    assert member_client.get(replace_url(ready, "node-1")).status_code == 405
    assert not Node.objects.filter(cluster=ready, replacing__isnull=False).exists()
