"""Pages make a fixed number of SQL queries however many clusters, nodes and events there are."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from clusters.models import Cluster, ClusterEvent, Node, Status
from offers.models import Host
from tests.factories import HostFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def make_clusters(environment, machine_type, count: int, *, machines: int = 2, events: int = 3) -> list[Cluster]:
    """Clusters in bulk (the service would take minutes for hundreds), each with nodes and events."""
    now = timezone.now()
    hosts = Host.objects.bulk_create(
        HostFactory.build(machine_type=machine_type, state=Host.State.RESERVED) for _ in range(count * machines)
    )
    clusters = Cluster.objects.bulk_create(
        Cluster(
            workspace_id=environment.workspace_id, environment=environment, name=f"c{i}", machine_type=machine_type,
            machine_count=machines, price_per_machine_hour=machine_type.price_per_machine_hour, provider="simulated",
            status=[Status.PROVISIONING, Status.READY, Status.DEGRADED][i % 3], status_changed_at=now, deadline_at=now,
            software="slurm",
        )
        for i in range(count)
    )
    Node.objects.bulk_create(
        Node(cluster=cluster, index=i, host=hosts[c * machines + i], state=Node.State.READY, log_tail="boot ok\n")
        for c, cluster in enumerate(clusters)
        for i in range(machines)
    )
    ClusterEvent.objects.bulk_create(
        ClusterEvent(cluster=cluster, actor="system", event="note", message=f"event {i}")
        for cluster in clusters
        for i in range(events)
    )
    return clusters


def count_queries(client: Client, url: str, **extra) -> int:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **extra)
    assert response.status_code == 200
    return len(captured.captured_queries)


@pytest.fixture
def client(owner):
    client = Client()
    client.force_login(owner)
    client.get(reverse("clusters:list"))  # warm the session and content types
    return client


@pytest.mark.parametrize("show", ["live", "all"])
def test_the_list_page_queries_do_not_grow_with_clusters(client, environment, machine_type, show):
    url = reverse("clusters:list") + f"?show={show}"
    make_clusters(environment, machine_type, 2)
    few = count_queries(client, url)
    make_clusters(environment, machine_type, 198)
    many = count_queries(client, url)
    assert few == many
    assert client.get(url).text.count('id="cluster-row-') == 200


def test_the_detail_page_queries_do_not_grow_with_clusters_nodes_or_events(client, environment, machine_type):
    small = make_clusters(environment, machine_type, 2)[0]
    few = count_queries(client, small.get_absolute_url())
    big = make_clusters(environment, machine_type, 198, machines=16, events=40)[0]
    many = count_queries(client, big.get_absolute_url())
    assert few == many
    assert client.get(big.get_absolute_url()).text.count('id="node-') == 16


@pytest.mark.parametrize("partial", ["status-card", "nodes-table", "events-list"])
def test_each_partial_queries_do_not_grow(client, environment, machine_type, partial):
    small = make_clusters(environment, machine_type, 2)[0]
    few = count_queries(client, small.get_absolute_url() + f"?partial={partial}", HTTP_HX_REQUEST="true")
    big = make_clusters(environment, machine_type, 50, machines=16, events=40)[0]
    many = count_queries(client, big.get_absolute_url() + f"?partial={partial}", HTTP_HX_REQUEST="true")
    assert few == many


def test_the_broadcast_render_queries_do_not_grow(environment, machine_type, django_assert_max_num_queries):
    from clusters.broadcast import broadcast_cluster

    small = make_clusters(environment, machine_type, 1)[0]
    with CaptureQueriesContext(connection) as few:
        broadcast_cluster(small.pk)
    big = make_clusters(environment, machine_type, 1, machines=32, events=60)[0]
    with CaptureQueriesContext(connection) as many:
        broadcast_cluster(big.pk)
    assert len(few.captured_queries) == len(many.captured_queries)


def test_the_offers_page_queries_do_not_grow_with_hosts(client, environment, machine_type):
    url = reverse("offers:list") + "?gpu=H100&machines=2"
    few = count_queries(client, url)
    make_clusters(environment, machine_type, 100)
    HostFactory.create_batch(20, machine_type=machine_type)
    assert count_queries(client, url) == few
