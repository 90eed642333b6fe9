"""The Replace action on a cluster's page: who may use it, how it asks first, and how the swap shows."""

from __future__ import annotations

import pytest
from django.conf import settings
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


def status_card(text: str) -> str:
    return text.split('id="status-card"')[1].split(">")[0]


def test_each_worker_row_offers_replace_behind_a_confirmation_and_the_head_none(member_client, ready):
    text = member_client.get(ready.get_absolute_url()).text
    assert "data-replace-nodes" in status_card(text)
    for name in ("node-1", "node-2", "node-3"):
        assert f'action="{replace_url(ready, name)}"' in text
    assert replace_url(ready, "node-0") not in text
    assert text.count('data-confirm-with="replace-node-question"') == 3
    assert 'data-node="node-2" data-address="10.77.0.3"' in text
    # The question itself is on the page once, for the script to fill in the row's node.
    question = text.split('<template id="replace-node-question">')[1].split("</template>")[0]
    assert text.count('id="replace-node-question"') == 1
    assert question.startswith("Replace {node}? A new ") and "private address {address}" in question
    assert "one more machine is billed ($" in question
    assert "onclick" not in text


def test_replace_shows_only_while_the_status_card_offers_it(member_client, cluster):
    # Installing: the rows hold their forms, which the stylesheet shows only once the status
    # card says Replace is offered, so a cluster that becomes replaceable pushes no row.
    text = member_client.get(cluster.get_absolute_url()).text
    assert f'action="{replace_url(cluster, "node-1")}"' in text
    assert "data-replace-nodes" not in status_card(text)
    css = (settings.BASE_DIR / "static" / "css" / "app.css").read_text()
    assert "form.replace-node { display:none; }" in css
    assert "#cluster-live:has(#status-card[data-replace-nodes]) form.replace-node { display:inline-flex; }" in css


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
    assert "data-replace-nodes" not in status_card(text), "one replacement at a time"
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
