"""Metering: exact charges, idempotent under reruns, month splits, failed clusters free."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accounts.models import Workspace
from billing import queries
from billing import services as billing
from billing.models import LedgerEntry, MachineUsage
from clusters.models import Node
from config.money import to_cents
from offers import lab
from tests.billing.conftest import T0, at, running_cluster

pytestmark = pytest.mark.django_db


def usage_total(workspace) -> Decimal:
    return -sum((e.amount for e in LedgerEntry.objects.filter(workspace=workspace, kind="usage")), Decimal("0"))


def test_two_machines_at_2_50_for_one_hour_cost_5_00(environment, machine_type):
    cluster = running_cluster(environment, machine_type, machines=2)
    billing.meter_usage(at(3600))
    entries = LedgerEntry.objects.filter(cluster=cluster)
    assert [e.amount for e in entries] == [Decimal("-5.00")]
    assert entries[0].description == "Cluster usage train"
    assert entries[0].period == dt.date(2026, 3, 1)
    environment.workspace.refresh_from_db()
    assert environment.workspace.credit_balance == Decimal("995.00")
    assert entries[0].balance_after == Decimal("995.00")


def test_a_worker_added_at_600_seconds_is_billed_from_then(environment, machine_type):
    cluster = running_cluster(environment, machine_type, machines=2)
    worker = Node.objects.create(cluster=cluster, index=2, host=machine_type.hosts.filter(state="free").first(),
                                 state=Node.State.READY, billing_started_at=at(600))
    billing.start_usage(cluster, [worker], at(600))
    billing.meter_usage(at(3600))
    # 2 × $2.50 × 1 h + 1 × $2.50 × 50 min = 5.00 + 2.0833… → 7.08
    assert usage_total(environment.workspace) == Decimal("7.08")
    item = queries.usage_for_month(environment.workspace, 2026, 3)[0]
    assert [r["amount"] for r in item["rows"]] == [Decimal("2.50"), Decimal("2.50"), Decimal("2.08")]
    assert item["rows"][2]["start"] == at(600)
    assert item["amount"] == sum(r["amount"] for r in item["rows"]) == Decimal("7.08")


def test_rerunning_metering_posts_nothing_more(environment, machine_type):
    running_cluster(environment, machine_type)
    first = billing.meter_usage(at(1800))
    again = billing.meter_usage(at(1800))
    assert first.posted == Decimal("2.50") and again.posted == 0 and again.entries == 0
    assert LedgerEntry.objects.filter(kind="usage").count() == 1


def test_many_small_runs_add_up_to_the_one_shot_amount(environment, machine_type):
    running_cluster(environment, machine_type, rate=Decimal("1.2345"))
    for second in range(7, 3601, 7):  # every run posts a fraction of a cent, rounding each time
        billing.meter_usage(at(second))
    billing.meter_usage(at(3600))
    assert usage_total(environment.workspace) == Decimal("2.46")  # each machine: round(1.2345) = 1.23
    assert MachineUsage.objects.filter(billed_until=at(3600)).count() == 2


def test_a_terminated_cluster_is_billed_to_its_end_and_no_further(environment, machine_type):
    cluster = running_cluster(environment, machine_type)
    billing.meter_usage(at(600))
    billing.end_usage(cluster, at(900))
    billing.meter_usage(at(7200))
    assert usage_total(environment.workspace) == Decimal("1.26")  # 2 × round(2.50 × 15 min = 0.625) = 2 × 0.63
    assert billing.meter_usage(at(9000)).machines == 0


def test_an_end_before_the_watermark_keeps_the_watermark(environment, machine_type):
    # A metering run read the clock just before terminate did: the interval ends at the watermark.
    cluster = running_cluster(environment, machine_type)
    billing.meter_usage(at(905))
    billing.end_usage(cluster, at(900))
    assert set(MachineUsage.objects.values_list("ended_at", flat=True)) == {at(905)}
    assert billing.meter_usage(at(1000)).posted == 0


def test_a_run_crossing_midnight_at_month_end_splits_the_charge_by_month(environment, machine_type):
    start = dt.datetime(2026, 3, 31, 23, 30, tzinfo=dt.UTC)
    running_cluster(environment, machine_type, started=start)
    billing.meter_usage(start + dt.timedelta(hours=1))
    by_period = dict(LedgerEntry.objects.values_list("period", "amount"))
    assert by_period == {dt.date(2026, 3, 1): Decimal("-2.50"), dt.date(2026, 4, 1): Decimal("-2.50")}
    march = queries.usage_for_month(environment.workspace, 2026, 3)[0]
    april = queries.usage_for_month(environment.workspace, 2026, 4)[0]
    assert march["amount"] == Decimal("2.50") and april["amount"] == Decimal("2.50")
    assert march["rows"][0]["end"] == dt.datetime(2026, 4, 1, tzinfo=dt.UTC)
    assert april["rows"][0]["start"] == dt.datetime(2026, 4, 1, tzinfo=dt.UTC)


def test_a_failed_cluster_posts_nothing(environment, machine_type):
    from clusters.services.create import create_cluster
    from offers.models import Host, HostFault

    lab.inject(Host.objects.filter(pk=machine_type.hosts.order_by("id").first().pk), fault=HostFault.BOOT_FAILS)
    from clusters import lifecycle

    cluster = create_cluster(environment=environment, name="doomed", machine_type=machine_type, machine_count=2)
    lifecycle.advance(cluster.pk)
    cluster.refresh_from_db()
    assert cluster.status == "failed"
    run = billing.meter_usage(at(10 ** 6))
    assert run.posted == 0
    assert not LedgerEntry.objects.filter(cluster=cluster).exists()
    assert queries.usage_for_month(environment.workspace, cluster.created_at.year, cluster.created_at.month) == []


def test_the_balance_equals_the_ledger(environment, machine_type):
    running_cluster(environment, machine_type, machines=3, rate=Decimal("3.3333"))
    for second in (61, 122, 999, 3601, 7777):
        billing.meter_usage(at(second))
    workspace = Workspace.objects.get(pk=environment.workspace.pk)
    ledger = sum(LedgerEntry.objects.filter(workspace=workspace, state="completed").values_list("amount", flat=True))
    assert workspace.credit_balance == Decimal("1000.00") + ledger


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    rate=st.decimals(min_value=Decimal("0.01"), max_value=Decimal("99.9999"), places=4),
    duration=st.integers(min_value=1, max_value=90 * 24 * 3600),
    cuts=st.lists(st.integers(min_value=0, max_value=10 ** 9), max_size=12),
    micro=st.integers(min_value=0, max_value=999_999),
)
def test_any_split_into_runs_posts_the_one_shot_amount(environment, machine_type, rate, duration, cuts, micro):
    MachineUsage.objects.all().delete()
    LedgerEntry.objects.all().delete()
    Node.objects.all().delete()
    from clusters.models import Cluster

    Cluster.objects.all().delete()
    machine_type.hosts.update(state="free")
    start = T0 + dt.timedelta(microseconds=micro)
    end = start + dt.timedelta(seconds=duration)
    cluster = running_cluster(environment, machine_type, machines=2, started=start, rate=rate)
    for cut in sorted(c % (duration + 1) for c in cuts):
        billing.meter_usage(start + dt.timedelta(seconds=cut))
    billing.end_usage(cluster, end)
    billing.meter_usage(end + dt.timedelta(days=1))
    one_shot = 2 * to_cents(rate * Decimal(duration) / Decimal(3600))  # two machines
    assert usage_total(environment.workspace) == one_shot
    # …and the month lines agree with the ledger, month by month.
    months = {(p.year, p.month) for p in LedgerEntry.objects.values_list("period", flat=True) if p is not None}
    lines = sum((item["amount"] for y, m in months for item in queries.usage_for_month(environment.workspace, y, m)), Decimal(0))
    assert lines == one_shot
