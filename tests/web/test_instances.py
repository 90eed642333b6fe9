"""The Instances page: every machine the workspace runs, each marked with its cluster, never ended alone."""

from __future__ import annotations

import pytest
from django.urls import reverse

from clusters.models import Node, Status

pytestmark = pytest.mark.django_db

URL = reverse("clusters:instances")


def test_it_lists_every_machine_marked_with_its_cluster(member_client, cluster):
    response = member_client.get(URL)
    assert response.status_code == 200
    for node in cluster.nodes.all():
        assert f'id="instance-{node.pk}"' in response.text
    assert response.text.count(f'href="{cluster.get_absolute_url()}" data-testid="instance-cluster">train</a>') == 4


def test_no_machine_offers_a_terminate_that_can_only_fail_but_leads_to_its_cluster(member_client, cluster):
    text = member_client.get(URL).text
    assert "instance_terminate" not in text and "/terminate/" not in text and ">Terminate<" not in text
    link = f'href="{cluster.get_absolute_url()}#terminate-zone-{cluster.pk}" data-testid="instance-stop">Stops with train'
    assert text.count(link) == 4
    assert f'id="terminate-zone-{cluster.pk}"' in member_client.get(cluster.get_absolute_url()).text


def test_a_manager_sees_them_too(manager, cluster):
    from tests.web.conftest import client_for

    assert 'data-testid="instance-cluster"' in client_for(manager).get(URL).text


def test_an_outsider_sees_none_of_them(outsider_client, cluster):
    response = outsider_client.get(URL)
    assert response.status_code == 200
    assert "instance-cluster" not in response.text and "No instances running" in response.text


def test_terminating_one_is_refused_naming_its_cluster_and_how_to_terminate_it(member_client, cluster):
    node = cluster.nodes.get(index=2)
    response = member_client.post(reverse("clusters:instance_terminate", args=[node.pk]), follow=True)
    assert response.status_code == 200
    assert "node-2 of cluster &#x27;train&#x27;" in response.text
    assert "Terminate the cluster instead" in response.text
    cluster.refresh_from_db()
    assert cluster.status == Status.PROVISIONING
    assert not Node.objects.filter(cluster=cluster, released_at__isnull=False).exists()


def test_an_outsider_cannot_touch_an_instance(outsider_client, cluster):
    node = cluster.nodes.first()
    assert outsider_client.post(reverse("clusters:instance_terminate", args=[node.pk])).status_code == 404


def test_anonymous_is_sent_to_sign_in(client):
    assert client.get(URL).status_code == 302
