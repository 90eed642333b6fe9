"""The Billing page and the usage API stay the same size and make the same queries with 20
clusters or 300: lines are summed in SQL and paged, machines read only when a line opens."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from api.keys import create_api_key
from billing import queries
from billing import services as billing
from billing.models import MachineUsage
from billing.views import USAGE_LINES_PER_PAGE
from clusters.models import Cluster, Node, Status
from offers.models import Host
from tests.billing.conftest import T0, at, client_for
from tests.factories import HostFactory

pytestmark = pytest.mark.django_db
MONTH = "?month=2026-03"
SECRET = "wg-private-key-never-read"


def billed_clusters(environment, machine_type, count: int, *, machines: int = 8, started: dt.datetime = T0) -> list[Cluster]:
    """Running clusters in bulk, each machine with a long log tail and the cluster with secrets."""
    hosts = Host.objects.bulk_create(
        HostFactory.build(machine_type=machine_type, state=Host.State.RESERVED) for _ in range(count * machines)
    )
    first = Cluster.objects.count()
    clusters = Cluster.objects.bulk_create(
        Cluster(
            workspace_id=environment.workspace_id, environment=environment, name=f"c{first + i}", machine_type=machine_type,
            machine_count=machines, price_per_machine_hour=Decimal("2.5000"), provider="simulated", status=Status.READY,
            status_changed_at=started, deadline_at=started, billing_started_at=started, node_secrets={"wg": SECRET},
        )
        for i in range(count)
    )
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, index=i, host=hosts[c * machines + i], state=Node.State.READY, billing_started_at=started,
             log_tail="x" * 4000)
        for c, cluster in enumerate(clusters)
        for i in range(machines)
    )
    MachineUsage.objects.bulk_create(
        MachineUsage(node=node, cluster_id=node.cluster_id, workspace_id=environment.workspace_id,
                     environment_id=environment.pk, rate=Decimal("2.5000"), started_at=started, billed_until=started)
        for node in nodes
    )
    return clusters


def measure(client, url: str, **headers) -> tuple[int, int, list[str]]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url, **headers)
    assert response.status_code == 200
    return len(captured.captured_queries), len(response.content), [q["sql"] for q in captured.captured_queries]


@pytest.fixture
def owner_client(owner):
    client = client_for(owner)
    client.get(reverse("billing:overview"))  # warm the session
    return client


def test_the_billing_page_is_the_same_size_and_queries_with_twenty_or_three_hundred_clusters(owner_client, environment, machine_type):
    url = reverse("billing:overview") + MONTH
    billed_clusters(environment, machine_type, 60)
    billing.meter_usage(at(3600))
    few, few_size, _ = measure(owner_client, url)
    billed_clusters(environment, machine_type, 240)
    billing.meter_usage(at(7200))
    many, many_size, sql = measure(owner_client, url)
    assert few == many
    assert many_size < few_size * 1.05
    page = owner_client.get(url).text
    assert page.count('class="usage-line"') == USAGE_LINES_PER_PAGE and f"Usage lines 1–{USAGE_LINES_PER_PAGE} of 300" in page
    assert not [q for q in sql if "log_tail" in q or "node_secrets" in q or "clusters_node" in q]


def test_every_line_on_every_page_equals_the_sum_of_its_machines(owner_client, environment, machine_type):
    # Started in February, metered into March: each line is cut at the month's first instant.
    billed_clusters(environment, machine_type, 55, machines=3, started=T0 - dt.timedelta(days=20, seconds=7))
    billing.meter_usage(at(3601))
    lines = queries.usage_lines(environment.workspace, 2026, 3)
    assert len(lines) == 55
    shown = list(lines[0:50]) + list(lines[50:100])
    opened = {item["cluster_id"]: item for item in queries.usage_for_month(environment.workspace, 2026, 3)}
    assert [line["cluster_id"] for line in shown] == list(opened)
    for line in shown:
        rows = opened[line["cluster_id"]]["rows"]
        assert line["machines"] == len(rows) == 3
        assert line["amount"] == sum(row["amount"] for row in rows) > 0
    assert queries.usage_total(environment.workspace, 2026, 3) == sum(line["amount"] for line in shown)


def test_a_line_opens_to_its_machines_without_reading_logs_or_secrets(owner_client, environment, machine_type):
    cluster = billed_clusters(environment, machine_type, 3)[1]
    billing.meter_usage(at(3600))
    url = reverse("billing:usage_detail", args=[cluster.pk]) + MONTH
    _, _, sql = measure(owner_client, url, HTTP_HX_REQUEST="true")
    text = owner_client.get(url, HTTP_HX_REQUEST="true").text
    assert text.count('class="machine-row"') == 8 and "$20.00" in text  # 8 × $2.50
    assert not [q for q in sql if "log_tail" in q or "node_secrets" in q]


def test_the_usage_api_pages_in_the_database(owner, workspace, environment, machine_type, client):
    key = create_api_key(workspace=workspace, created_by=owner, name="scale")[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    url = "/api/v1/billing/usage?month=2026-03&limit=50"
    billed_clusters(environment, machine_type, 60)
    billing.meter_usage(at(3600))
    few, few_size, _ = measure(client, url, **headers)
    billed_clusters(environment, machine_type, 240)
    billing.meter_usage(at(7200))
    many, many_size, sql = measure(client, url, **headers)
    assert few == many
    assert many_size < few_size * 1.05
    body = client.get(url + "&offset=250", **headers).json()
    assert len(body["data"]) == 50 and body["meta"]["total"] == 300
    assert [len(item["rows"]) for item in body["data"]] == [8] * 50
    # $2.50 × 8 machines × 2 hours for every cluster, whichever page shows it
    assert Decimal(body["meta"]["total_amount"]) == Decimal("12000.00")  # 300 clusters
    assert not [q for q in sql if "log_tail" in q or "node_secrets" in q]
