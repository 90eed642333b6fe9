"""Pages make a fixed number of SQL queries however many clusters, nodes and events there are."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from clusters.live import PageState, render_cluster_changes, render_cluster_now
from clusters.models import Cluster, ClusterEvent, Node, Status
from clusters.queries import CLUSTERS_PER_PAGE
from offers.models import Host
from tests.factories import HostFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


_serial = itertools.count()


def make_clusters(environment, machine_type, count: int, *, machines: int = 2, events: int = 3) -> list[Cluster]:
    """Clusters in bulk (the service would take minutes for hundreds), each with nodes and events.
    Names stay unique across calls: live clusters of one environment never share a name."""
    now = timezone.now()
    hosts = Host.objects.bulk_create(
        HostFactory.build(machine_type=machine_type, state=Host.State.RESERVED) for _ in range(count * machines)
    )
    clusters = Cluster.objects.bulk_create(
        Cluster(
            workspace_id=environment.workspace_id, environment=environment, name=f"c{next(_serial)}", machine_type=machine_type,
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


@pytest.mark.parametrize("status", ["live", "all", "ready"])
def test_the_list_page_queries_and_size_do_not_grow_with_clusters(client, environment, machine_type, status):
    url = reverse("clusters:list") + f"?status={status}"
    make_clusters(environment, machine_type, 150)
    few = count_queries(client, url)
    few_size = len(client.get(url).content)
    make_clusters(environment, machine_type, 600)
    many = count_queries(client, url)
    assert few == many
    page = client.get(url).text
    assert page.count('id="cluster-row-') == CLUSTERS_PER_PAGE
    assert len(page.encode()) < few_size * 1.05  # names grow a digit longer, nothing more


def test_the_list_page_reads_no_nodes(client, environment, machine_type):
    make_clusters(environment, machine_type, 3, machines=8)
    with CaptureQueriesContext(connection) as captured:
        client.get(reverse("clusters:list"))
    assert not [q["sql"] for q in captured.captured_queries if "clusters_node" in q["sql"]]
    assert not [q["sql"] for q in captured.captured_queries if "node_secrets" in q["sql"]]


def test_the_list_pages_through_every_cluster_of_a_status_newest_first(client, environment, machine_type):
    clusters = make_clusters(environment, machine_type, 3 * CLUSTERS_PER_PAGE + 6)  # every third one is ready
    ready = [c for c in clusters if c.status == Status.READY]
    shown = []
    for number in (1, 2):  # a full page, then the two left over
        page = client.get(reverse("clusters:list"), {"status": "ready", "page": number}).text
        shown += [int(part.split('"')[0]) for part in page.split('id="cluster-row-')[1:]]
    assert shown == sorted((c.pk for c in ready), reverse=True)
    assert f"Page 1 of 2 · {CLUSTERS_PER_PAGE + 2} clusters" in client.get(reverse("clusters:list"), {"status": "ready"}).text
    assert client.get(reverse("clusters:list"), {"status": "sleeping"}).status_code == 404


def test_the_detail_page_queries_do_not_grow_with_clusters_nodes_or_events(client, environment, machine_type):
    small = make_clusters(environment, machine_type, 2)[0]
    few = count_queries(client, small.get_absolute_url())
    big = make_clusters(environment, machine_type, 198, machines=16, events=40)[0]
    many = count_queries(client, big.get_absolute_url())
    assert few == many
    assert client.get(big.get_absolute_url()).text.count('<tr id="node-') == 16


@pytest.mark.parametrize("partial", ["status-card", "nodes-table", "events-list"])
def test_each_partial_queries_do_not_grow(client, environment, machine_type, partial):
    small = make_clusters(environment, machine_type, 2)[0]
    few = count_queries(client, small.get_absolute_url() + f"?partial={partial}", HTTP_HX_REQUEST="true")
    big = make_clusters(environment, machine_type, 50, machines=16, events=40)[0]
    many = count_queries(client, big.get_absolute_url() + f"?partial={partial}", HTTP_HX_REQUEST="true")
    assert few == many


def add_events(cluster: Cluster, count: int) -> None:
    ClusterEvent.objects.bulk_create(
        ClusterEvent(cluster=cluster, actor="system", event="note", message=f"older event {i}") for i in range(count)
    )


def test_the_detail_page_shows_the_newest_events_whatever_the_history(client, environment, machine_type):
    short, long = make_clusters(environment, machine_type, 2, machines=8, events=30)
    Cluster.objects.filter(pk__in=[short.pk, long.pk]).update(status=Status.READY)
    add_events(long, 4970)
    few = count_queries(client, short.get_absolute_url())
    short_page = client.get(short.get_absolute_url()).content
    many = count_queries(client, long.get_absolute_url())
    long_page = client.get(long.get_absolute_url()).text
    assert few == many
    assert long_page.count('<li id="event-') == 20
    assert "older event 4969" in long_page and "older event 4949" not in long_page
    assert len(long_page.encode()) < len(short_page) * 1.05


def test_older_events_load_on_request_twenty_at_a_time(client, environment, machine_type):
    cluster = make_clusters(environment, machine_type, 1, events=0)[0]
    add_events(cluster, 45)
    page = client.get(cluster.get_absolute_url()).text
    oldest_shown = min(int(part.split('"')[0]) for part in page.split('<li id="event-')[1:])
    assert f"?partial=older-events&amp;before={oldest_shown}" in page
    assert f"?before={oldest_shown}#events-list" in page  # the same without JavaScript
    older = client.get(cluster.get_absolute_url(), {"partial": "older-events", "before": oldest_shown}, HTTP_HX_REQUEST="true").text
    assert older.count('<li id="event-') == 20 and "older event 24" in older and "older event 5<" not in older
    last = client.get(cluster.get_absolute_url(), {"partial": "older-events", "before": oldest_shown - 20}, HTTP_HX_REQUEST="true").text
    assert last.count('<li id="event-') == 5 and 'id="older-events"' not in last
    assert client.get(cluster.get_absolute_url(), {"before": "x"}).status_code == 404


def joined_page(cluster: Cluster) -> PageState:
    """What a socket's page holds once it has joined: everything as it is now."""
    page = PageState()
    render_cluster_now(cluster.pk, page)
    return page


def test_a_status_push_renders_in_constant_queries_and_bytes_whatever_the_history(environment, machine_type):
    short, long = make_clusters(environment, machine_type, 2, machines=8, events=6)
    Cluster.objects.filter(pk__in=[short.pk, long.pk]).update(status=Status.READY)
    add_events(long, 4994)
    pushes = {}
    for cluster in (short, long):
        page = joined_page(cluster)
        page.last_event_id = cluster.events.order_by("-id").values_list("id", flat=True)[1]  # lacks the newest
        with CaptureQueriesContext(connection) as queries:
            messages = render_cluster_changes(cluster.pk, None, page)
        pushes[cluster.pk] = (len(queries.captured_queries), sum(len(m.encode()) for m in messages), messages)
        assert page.last_event_id == cluster.events.order_by("-id").values_list("id", flat=True)[0]
    (short_queries, short_bytes, _), (long_queries, long_bytes, messages) = pushes[short.pk], pushes[long.pk]
    assert short_queries == long_queries
    assert long_bytes < short_bytes * 1.05
    assert "".join(messages).count('<li id="event-') == 1


def test_a_node_push_carries_only_the_rows_that_changed(environment, machine_type):
    cluster = make_clusters(environment, machine_type, 1, machines=16, events=3)[0]
    page = joined_page(cluster)
    latest = page.last_event_id
    Node.objects.filter(cluster=cluster, index__in=[2, 5]).update(step="installing slurm")
    changed = list(cluster.nodes.filter(index__in=[2, 5]).values_list("pk", flat=True))
    card, cells = render_cluster_changes(cluster.pk, changed, page)
    assert 'id="status-card" hx-swap-oob="true"' in card and 'id="nodes-table"' not in card and "event-" not in card
    # Only their Step cells changed: those two cells, not the rows.
    assert cells.startswith('<td data-label="Step" id="node-2-step" hx-swap-oob="true">') and cells.count("<td ") == 2
    assert 'id="node-5-step" hx-swap-oob="true"' in cells and "<tr" not in cells
    Node.objects.filter(cluster=cluster, index=2).update(health_detail="gpu 3 fell off the bus")
    card, rows = render_cluster_changes(cluster.pk, changed, page)
    assert rows.startswith('<tr id="node-2" hx-swap-oob="true">') and rows.count("<tr id=") == 1
    assert page.last_event_id == latest


def test_the_offers_page_queries_do_not_grow_with_hosts(client, environment, machine_type):
    url = reverse("offers:list") + "?gpu=H100&machines=2"
    few = count_queries(client, url)
    make_clusters(environment, machine_type, 100)
    HostFactory.create_batch(20, machine_type=machine_type)
    assert count_queries(client, url) == few
