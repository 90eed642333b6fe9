"""The Billing page and the usage API stay the same size and make the same queries with 20
clusters or 300: lines are summed in SQL and paged, machines read only when a line opens."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from api.keys import create_api_key
from billing import queries
from billing import services as billing
from billing.models import LedgerEntry, MachineUsage, UsageMonth
from billing.months import month_start
from billing.views import USAGE_LINES_PER_PAGE
from clusters.models import Cluster, Node, Status
from offers.models import Host
from tests.billing.conftest import T0, at, client_for, running_cluster
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
    # As start_usage does: the burn rate and the month of each line.
    billing.refresh_usage_rate(environment.workspace_id)
    billing.record_usage_months((c.pk, environment.workspace_id, environment.pk, month_start(started)) for c in clusters)
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
    assert page.count('class="usage-line"') == USAGE_LINES_PER_PAGE and f"Usage lines 1–{USAGE_LINES_PER_PAGE}<" in page
    assert 'rel="next"' in page and 'rel="prev"' not in page
    assert not [q for q in sql if "log_tail" in q or "node_secrets" in q or "clusters_node" in q]
    # Nothing on the page reads every cluster or every machine: the lines are not counted and
    # the burn rate is the workspace's own column.
    assert not [q for q in sql if "COUNT(*)" in q and "clusters_cluster" in q]
    assert not [q for q in sql if 'SUM("billing_machineusage"."rate")' in q]
    last = owner_client.get(url + "&page=12").text
    assert last.count('class="usage-line"') == 25 and "Usage lines 276–300<" in last
    assert 'rel="next"' not in last and "page=11" in last
    past = owner_client.get(url + "&page=13").text
    assert 'class="usage-line"' not in past and "page=12" in past
    assert owner_client.get(url + "&page=x").text.count('class="usage-line"') == 25


def test_the_burn_rate_follows_every_interval_that_opens_or_closes(environment, machine_type):
    from accounts.models import Workspace

    def kept() -> Decimal:
        return Workspace.objects.get(pk=environment.workspace_id).usage_rate

    def summed() -> Decimal:
        open_usage = MachineUsage.objects.filter(workspace_id=environment.workspace_id, ended_at__isnull=True)
        return sum(open_usage.values_list("rate", flat=True), Decimal(0))

    first, second = billed_clusters(environment, machine_type, 2, machines=3)
    assert kept() == summed() == Decimal("15.0000")
    billing.end_usage(first, at(600))
    assert kept() == summed() == Decimal("7.5000")
    replaced = Node.objects.get(cluster=second, index=2)
    billing.end_node_usage([replaced.pk], at(700))
    assert kept() == summed() == Decimal("5.0000")
    billing.end_node_usage([replaced.pk], at(800))  # ended twice: nothing changes
    assert kept() == Decimal("5.0000")
    host = HostFactory(machine_type=machine_type, state=Host.State.RESERVED)
    worker = Node.objects.create(cluster=second, index=3, host=host, state=Node.State.READY)
    billing.start_usage(second, [worker], at(900))
    billing.start_usage(second, [worker], at(901))  # a rerun opens nothing twice
    assert kept() == summed() == Decimal("7.5000")
    assert queries.balance_summary(environment.workspace)["active_usage_cost_per_hour"] == Decimal("7.50")
    billing.meter_usage(at(3600))
    assert kept() == summed()  # metering moves watermarks, not the rate


def test_metering_corrects_a_burn_rate_that_drifted(environment, machine_type, caplog):
    from accounts.models import Workspace

    billed_clusters(environment, machine_type, 1, machines=2)
    Workspace.objects.filter(pk=environment.workspace_id).update(usage_rate=Decimal("99.0000"))
    billing.warn_low_balances()
    assert Workspace.objects.get(pk=environment.workspace_id).usage_rate == Decimal("5.0000")
    assert "kept a burn rate of 99.0000/h" in caplog.text
    MachineUsage.objects.update(ended_at=at(60), billed_until=at(60))  # closed behind the services' back
    assert billing.check_usage_rates({}) == [environment.workspace_id]
    assert Workspace.objects.get(pk=environment.workspace_id).usage_rate == 0


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
        assert line["machines"] == len(rows) == opened[line["cluster_id"]]["machines"] == 3
        assert line["amount"] == sum(row["amount"] for row in rows) == opened[line["cluster_id"]]["amount"] > 0
        assert line["accruing"] is opened[line["cluster_id"]]["accruing"]
    assert queries.usage_total(environment.workspace, 2026, 3) == sum(line["amount"] for line in shown)
    # February's lines hold the 20 days before March, cut at the same instant.
    february = queries.usage_lines(environment.workspace, 2026, 2)
    for line in february[0:100]:
        one = queries.cluster_usage_for_month(environment.workspace, line["cluster_id"], 2026, 2)
        assert one is not None and line["amount"] == sum(row["amount"] for row in one["rows"]) == one["amount"] > 0
        assert line["accruing"] is one["accruing"] is False


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
    client.get(url, **headers)  # the key's first use of the minute is noted (api.keys.touch_last_used)
    few, few_size, _ = measure(client, url, **headers)
    few_rows, few_rows_size, _ = measure(client, url + "&rows=true", **headers)
    billed_clusters(environment, machine_type, 240)
    billing.meter_usage(at(7200))
    many, many_size, sql = measure(client, url, **headers)
    many_rows, many_rows_size, rows_sql = measure(client, url + "&rows=true", **headers)
    assert few == many and few_rows == many_rows
    assert many_size < few_size * 1.05 and many_rows_size < few_rows_size * 1.05
    # Lines only by default: no machine rows read at all.
    assert not [q for q in sql if "clusters_node" in q]
    body = client.get(url + "&offset=250", **headers).json()
    assert len(body["data"]) == 50 and body["meta"]["total"] == 300
    assert {(item["machines"], item["rows"]) for item in body["data"]} == {(8, None)}
    with_rows = client.get(url + "&offset=250&rows=true", **headers).json()
    assert [len(item["rows"]) for item in with_rows["data"]] == [8] * 50
    for line, opened in zip(body["data"], with_rows["data"], strict=True):
        assert line["amount"] == opened["amount"] == str(sum(Decimal(row["amount"]) for row in opened["rows"]))
    # $2.50 × 8 machines × 2 hours for every cluster, whichever page shows it
    assert Decimal(body["meta"]["total_amount"]) == Decimal("12000.00")  # 300 clusters
    assert sum(Decimal(item["amount"]) for item in body["data"]) == Decimal("2000.00")
    assert not [q for q in sql + rows_sql if "log_tail" in q or "node_secrets" in q]


def test_one_usage_line_reads_only_its_own_machines(owner, workspace, environment, machine_type, client):
    key = create_api_key(workspace=workspace, created_by=owner, name="scale")[1]
    headers = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    cluster = billed_clusters(environment, machine_type, 20)[7]
    billing.meter_usage(at(3600))
    url = f"/api/v1/billing/usage/{cluster.pk}?month=2026-03"
    client.get(url, **headers)  # the key's first use of the minute is noted (api.keys.touch_last_used)
    few, _, _ = measure(client, url, **headers)
    billed_clusters(environment, machine_type, 100)
    billing.meter_usage(at(7200))
    many, _, sql = measure(client, url, **headers)
    assert few == many
    line = client.get(url, **headers).json()["data"]
    assert line["cluster_id"] == cluster.pk and line["machines"] == len(line["rows"]) == 8
    assert Decimal(line["amount"]) == sum(Decimal(row["amount"]) for row in line["rows"]) == Decimal("40.00")
    assert not [q for q in sql if "log_tail" in q or "node_secrets" in q]


def test_the_months_with_lines_are_the_months_the_machines_were_billed_in(environment, machine_type):
    from billing.months import month_bounds
    from billing.queries import _usage_in_month

    early = running_cluster(environment, machine_type, started=dt.datetime(2026, 1, 30, 23, 0, tzinfo=dt.UTC), name="early")
    billing.meter_usage(dt.datetime(2026, 2, 1, 0, 0, tzinfo=dt.UTC))  # to the first instant of February, not past it
    billing.end_usage(early, dt.datetime(2026, 2, 1, 0, 0, tzinfo=dt.UTC))
    late = running_cluster(environment, machine_type, started=dt.datetime(2026, 2, 27, 10, 0, tzinfo=dt.UTC), name="late")
    billing.meter_usage(dt.datetime(2026, 4, 2, 0, 0, tzinfo=dt.UTC))  # runs through March into April
    fresh = running_cluster(environment, machine_type, started=dt.datetime(2026, 4, 3, 0, 0, tzinfo=dt.UTC), name="fresh")
    for year, month, expected in ((2026, 1, {early}), (2026, 2, {late}), (2026, 3, {late}), (2026, 4, {late, fresh}),
                                  (2026, 5, set())):
        start, end = month_bounds(year, month)
        by_machines = set(_usage_in_month(environment.workspace_id, start, end).values_list("cluster_id", flat=True))
        lines = queries.usage_lines(environment.workspace, year, month)
        assert {line["cluster_id"] for line in lines} == by_machines == {c.pk for c in expected}, (year, month)
        assert lines.count() == len(by_machines)
    assert set(UsageMonth.objects.values_list("cluster_id", "period")) == {
        (early.pk, dt.date(2026, 1, 1)), (late.pk, dt.date(2026, 2, 1)), (late.pk, dt.date(2026, 3, 1)),
        (late.pk, dt.date(2026, 4, 1)), (fresh.pk, dt.date(2026, 4, 1)),
    }


def test_the_month_picker_lists_the_months_with_entries(environment, machine_type):
    from accounts.models import Workspace

    cluster = running_cluster(environment, machine_type, started=dt.datetime(2025, 11, 30, 23, 0, tzinfo=dt.UTC))
    billing.meter_usage(dt.datetime(2025, 12, 1, 0, 30, tzinfo=dt.UTC))  # November and December
    billing.end_usage(cluster, dt.datetime(2025, 12, 1, 0, 30, tzinfo=dt.UTC))
    later = running_cluster(environment, machine_type, started=dt.datetime(2026, 2, 1, 1, 0, tzinfo=dt.UTC), name="later")
    billing.meter_usage(dt.datetime(2026, 2, 1, 2, 0, tzinfo=dt.UTC))  # nothing in January
    assert later.pk
    workspace = Workspace.objects.get(pk=environment.workspace_id)
    months = queries.months_with_activity(workspace)
    now = month_start(timezone.now())
    assert months[0] == now
    assert [m for m in months if m != now] == [dt.date(2026, 2, 1), dt.date(2025, 12, 1), dt.date(2025, 11, 1)]
    with CaptureQueriesContext(connection) as captured:
        queries.months_with_activity(workspace)
    assert len(captured.captured_queries) == 2


def test_the_migration_fills_the_months_the_services_would_have_written(environment, machine_type):
    import importlib

    from django.apps import apps

    running_cluster(environment, machine_type, started=dt.datetime(2026, 1, 30, 23, 0, tzinfo=dt.UTC), name="long")
    billing.meter_usage(dt.datetime(2026, 3, 1, 0, 0, tzinfo=dt.UTC))  # January, February; March not yet
    running_cluster(environment, machine_type, started=dt.datetime(2026, 3, 2, 0, 0, tzinfo=dt.UTC), name="new")
    written = set(UsageMonth.objects.values_list("cluster_id", "workspace_id", "environment_id", "period"))
    assert len(written) == 3
    UsageMonth.objects.all().delete()
    importlib.import_module("billing.migrations.0005_usage_months").fill_usage_months(apps, None)
    assert set(UsageMonth.objects.values_list("cluster_id", "workspace_id", "environment_id", "period")) == written


def test_the_checklist_reads_credits_through_the_index_that_leaves_usage_out(workspace, environment):
    def entry(kind: str, amount: str, key: str) -> None:
        LedgerEntry.objects.create(workspace=workspace, environment=environment, kind=kind, amount=Decimal(amount),
                                   idempotency_key=key, description=key)

    for i in range(20):
        entry(LedgerEntry.Kind.USAGE, "-1.00", f"usage-{i}")
    assert not queries.credits_received(workspace.pk).exists()
    entry(LedgerEntry.Kind.DEPOSIT, "50.00", "deposit")
    assert queries.credits_received(workspace.pk).exists()
    with transaction.atomic(), connection.cursor() as cursor:
        # The tables are small here: without this PostgreSQL reads them whole whatever the indexes.
        cursor.execute("SET LOCAL enable_seqscan = off")
        plan = queries.credits_received(workspace.pk).explain()
    assert "ledger_credits_by_date" in plan, plan


def test_the_billing_page_reads_the_months_usage_entries_once(owner_client, environment, machine_type):
    for i in range(3):
        running_cluster(environment, machine_type, name=f"c{i}")
    billing.meter_usage(timezone.now())
    with CaptureQueriesContext(connection) as queries_run:
        assert owner_client.get(reverse("billing:overview")).status_code == 200
    month_reads = [q["sql"] for q in queries_run.captured_queries
                   if "billing_ledgerentry" in q["sql"] and "'usage'" in q["sql"] and "NOT (" not in q["sql"]
                   and '"cluster_id" IN' not in q["sql"]]
    assert len(month_reads) == 1, month_reads
