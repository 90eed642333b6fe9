"""Balance and budget enforcement, warnings, the create checks, concurrent metering."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from accounts.models import Workspace
from billing import ledger
from billing import services as billing
from billing.models import BillingNotice, LedgerEntry, MachineUsage
from billing.months import next_month_start
from clusters import enforcement
from clusters.errors import ClusterError
from clusters.models import Cluster, Reason, Status
from clusters.services.create import create_cluster
from tests.billing.conftest import at, running_cluster

SWEEP = dt.timedelta(seconds=60)


def live_from(environment, machine_type, *, ago: dt.timedelta, machines: int = 2, name: str = "train") -> Cluster:
    return running_cluster(environment, machine_type, machines=machines, started=timezone.now() - ago, name=name)


@pytest.mark.django_db(transaction=True)
def test_exhausting_the_balance_stops_every_cluster_within_two_sweeps(environment, machine_type, owner, mailoutbox):
    Workspace.objects.filter(pk=environment.workspace_id).update(credit_balance=Decimal("10.00"))
    # Two clusters of two machines at $2.50: $10/h, running for 59 minutes already.
    first = live_from(environment, machine_type, ago=dt.timedelta(minutes=59), name="one")
    second = live_from(environment, machine_type, ago=dt.timedelta(minutes=59), name="two")
    now = timezone.now()
    enforcement.meter_and_enforce(now)  # 4 × $2.46 posted, $0.16 left: still running
    assert Workspace.objects.get(pk=environment.workspace_id).credit_balance == Decimal("0.16")
    assert set(Cluster.objects.values_list("status", flat=True)) == {Status.READY}
    enforcement.meter_and_enforce(now + SWEEP)  # the next sweep: the balance ran out in between
    assert Workspace.objects.get(pk=environment.workspace_id).credit_balance == Decimal("0.00")
    for cluster in (first, second):
        cluster.refresh_from_db()
        assert cluster.status == Status.TERMINATED  # the lifecycle ran after commit (eager tasks)
        assert cluster.termination_reason == Reason.BALANCE_EXHAUSTED
    # One email per stopped cluster, sent by the lifecycle's termination hook.
    assert sorted(m.subject for m in mailoutbox if "stopped" in m.subject) == [
        "Your cluster one was stopped: your balance ran out", "Your cluster two was stopped: your balance ran out",
    ]
    # Nothing is billed after the stop.
    posted = LedgerEntry.objects.filter(kind="usage").count()
    enforcement.meter_and_enforce(now + SWEEP * 5)
    assert LedgerEntry.objects.filter(kind="usage").count() == posted


@pytest.mark.django_db(transaction=True)
def test_reaching_the_monthly_budget_stops_that_environments_clusters_only(environment, machine_type, owner, mailoutbox):
    from accounts.models import Environment

    environment.monthly_budget = Decimal("4.00")
    environment.save()
    other = Environment.objects.create(workspace=environment.workspace, name="prod", monthly_budget=Decimal("1000"))
    # The clock is pinned to this month's last minute: the hour of usage never straddles a
    # month boundary, and the stop and the refused create below, which read the real clock,
    # fall in the same month at or before it.
    now = next_month_start(timezone.now()) - dt.timedelta(minutes=1)
    capped = running_cluster(environment, machine_type, started=now - dt.timedelta(hours=1), name="capped")  # $5.00 this month…
    free = running_cluster(other, machine_type, started=now - dt.timedelta(hours=1), name="free")
    enforcement.meter_and_enforce(now)
    capped.refresh_from_db()
    free.refresh_from_db()
    assert (capped.status, capped.termination_reason) == (Status.TERMINATED, Reason.BUDGET_REACHED)
    assert free.status == Status.READY
    assert [m.subject for m in mailoutbox] == ["Your cluster capped was stopped: the monthly budget was reached"]
    assert mailoutbox[0].to == [owner.email]
    with pytest.raises(ClusterError) as refused:
        create_cluster(environment=environment, name="again", machine_type=machine_type, machine_count=2)
    assert (refused.value.code, refused.value.status) == ("budget_reached", 402)


@pytest.mark.django_db(transaction=True)
def test_a_budget_reached_between_two_passes_gets_a_pass_of_its_own_and_stops_within_a_cent(environment, machine_type):
    """The periodic pass names the instant an environment reaches its budget when that comes
    before the next pass; a pass then stops it a cent past the budget, not a period past."""
    environment.monthly_budget = Decimal("15.99")
    environment.save()
    now = next_month_start(timezone.now()) - dt.timedelta(minutes=10)
    # $20/h, 47 minutes in: 2 × $7.83 spent, the budget reached 59.4 s after this pass.
    cluster = running_cluster(environment, machine_type, started=now - dt.timedelta(minutes=47), rate=Decimal("10.00"))
    result = enforcement.meter_and_enforce(now)
    reached = dt.datetime.fromisoformat(result["next_pass_at"])
    assert abs((reached - now).total_seconds() - 59.4) < 0.5, result["next_pass_at"]
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    # A periodic pass a minute later would land $0.02 past ($20/h × 0.6 s + the stop); the
    # budget's own pass lands at most a cent past, whatever the rate.
    assert enforcement.meter_and_enforce(reached)["next_pass_at"] is None
    cluster.refresh_from_db()
    assert (cluster.status, cluster.termination_reason) == (Status.TERMINATED, Reason.BUDGET_REACHED)
    spent = billing.month_to_date_spend([environment.pk], reached)[environment.pk]
    assert Decimal("15.99") <= spent <= Decimal("16.00"), spent


@pytest.mark.django_db
def test_a_budget_far_from_reached_asks_for_no_extra_pass(environment, machine_type):
    environment.monthly_budget = Decimal("1000.00")
    environment.save()
    now = next_month_start(timezone.now()) - dt.timedelta(minutes=10)
    running_cluster(environment, machine_type, started=now - dt.timedelta(minutes=30))
    assert enforcement.meter_and_enforce(now)["next_pass_at"] is None


@pytest.mark.django_db
def test_budgets_start_again_at_the_month_boundary(environment, machine_type):
    environment.monthly_budget = Decimal("10.00")
    environment.save()
    start = dt.datetime(2026, 1, 31, 20, 0, tzinfo=dt.UTC)
    running_cluster(environment, machine_type, started=start)  # $5/h
    billing.meter_usage(dt.datetime(2026, 2, 1, 1, 0, tzinfo=dt.UTC))  # 4 h in Jan ($20), 1 h in Feb ($5)
    january = dt.datetime(2026, 1, 31, 23, 0, tzinfo=dt.UTC)
    february = dt.datetime(2026, 2, 1, 1, 0, tzinfo=dt.UTC)
    assert billing.month_to_date_spend([environment.pk], january) == {environment.pk: Decimal("20.00")}
    assert billing.month_to_date_spend([environment.pk], february) == {environment.pk: Decimal("5.00")}
    with pytest.raises(ClusterError):
        billing.check_budget(environment, january)
    billing.check_budget(environment, february)  # $5 of $10: allowed again
    billing.meter_usage(dt.datetime(2026, 2, 1, 2, 0, tzinfo=dt.UTC))
    with pytest.raises(ClusterError):
        billing.check_budget(environment, dt.datetime(2026, 2, 1, 2, 0, tzinfo=dt.UTC))


@pytest.mark.django_db
def test_creating_needs_one_hour_of_the_whole_cluster_and_at_least_10_dollars(environment, machine_type):
    assert billing.required_balance(Decimal("5.00")) == Decimal("10.00")
    assert billing.required_balance(Decimal("20.005")) == Decimal("20.01")
    Workspace.objects.filter(pk=environment.workspace_id).update(credit_balance=Decimal("9.99"))
    with pytest.raises(ClusterError) as refused:
        create_cluster(environment=environment, name="x", machine_type=machine_type, machine_count=2)
    assert refused.value.code == "insufficient_credits"


@pytest.mark.django_db(transaction=True)
def test_the_low_balance_warning_goes_once_per_crossing(environment, machine_type, owner, mailoutbox):
    live_from(environment, machine_type, ago=dt.timedelta(seconds=0))  # $5/h
    Workspace.objects.filter(pk=environment.workspace_id).update(credit_balance=Decimal("4.00"))  # < 1 h left
    assert sorted(billing.warn_low_balances()) == [f"balance_low:{environment.workspace_id}:1h",
                                                   f"balance_low:{environment.workspace_id}:24h"]
    assert billing.warn_low_balances() == []
    assert len(mailoutbox) == 2
    ledger.post_entry(workspace_id=environment.workspace_id, kind="deposit", amount=Decimal("50"),
                       idempotency_key="t1", description="top-up")  # 10.8 h left: the 1 h warning re-arms
    assert billing.warn_low_balances() == []
    Workspace.objects.filter(pk=environment.workspace_id).update(credit_balance=Decimal("3.00"))
    assert billing.warn_low_balances() == [f"balance_low:{environment.workspace_id}:1h"]
    assert len(mailoutbox) == 3
    assert BillingNotice.objects.filter(kind="balance_low").count() == 3


@pytest.mark.django_db(transaction=True)
def test_a_top_up_that_leaves_hours_of_runway_is_not_answered_with_balance_is_low(environment, machine_type, owner,
                                                                                mailoutbox):
    workspace_id = environment.workspace_id
    Workspace.objects.filter(pk=workspace_id).update(credit_balance=Decimal("0.00"))
    live_from(environment, machine_type, ago=dt.timedelta(seconds=0))  # $5/h
    ledger.post_entry(workspace_id=workspace_id, kind="deposit", amount=Decimal("50"), idempotency_key="t1",
                       description="top-up")  # 10 h of runway, chosen by the customer a moment ago
    assert billing.warn_low_balances() == []
    assert [m.subject for m in mailoutbox if "balance is low" in m.subject] == []
    # The next threshold it crosses after the top-up still warns.
    Workspace.objects.filter(pk=workspace_id).update(credit_balance=Decimal("4.00"))
    assert billing.warn_low_balances() == [f"balance_low:{workspace_id}:1h"]
    # A top-up that left more than a day warns when the day runs under 24 hours.
    ledger.post_entry(workspace_id=workspace_id, kind="deposit", amount=Decimal("146"), idempotency_key="t2",
                       description="top-up")  # $150: 30 h
    assert billing.warn_low_balances() == []
    Workspace.objects.filter(pk=workspace_id).update(credit_balance=Decimal("100.00"))
    assert billing.warn_low_balances() == [f"balance_low:{workspace_id}:24h"]


@pytest.mark.django_db(transaction=True)
def test_a_low_balance_is_not_warned_about_again_when_only_what_runs_changed(environment, machine_type, owner,
                                                                             mailoutbox):
    # $2,400 at $120/h: 20 hours left, under the 24-hour warning.
    workspace_id = environment.workspace_id
    Workspace.objects.filter(pk=workspace_id).update(credit_balance=Decimal("2400.00"))
    first = running_cluster(environment, machine_type, machines=2, rate=Decimal("60"), started=timezone.now(), name="a")
    assert billing.warn_low_balances() == [f"balance_low:{workspace_id}:24h"]
    # It ends (nothing runs: the hours left are no longer under 24), and four minutes later
    # another cluster at the same rate starts: not a cent came in, so no second email.
    billing.end_usage(first, timezone.now())
    assert billing.warn_low_balances() == []
    running_cluster(environment, machine_type, machines=2, rate=Decimal("60"), started=timezone.now(), name="b")
    assert billing.warn_low_balances() == []
    assert len([m for m in mailoutbox if "balance is low" in m.subject]) == 1
    # A top-up re-arms it at once ...
    ledger.post_entry(workspace_id=workspace_id, kind="deposit", amount=Decimal("600"), idempotency_key="t",
                       description="top-up")  # $3,000: 25 hours
    assert billing.warn_low_balances() == []
    Workspace.objects.filter(pk=workspace_id).update(credit_balance=Decimal("2300.00"))
    assert billing.warn_low_balances() == [f"balance_low:{workspace_id}:24h"]
    # ... and without one, a day after the warning.
    Workspace.objects.filter(pk=workspace_id).update(credit_balance=Decimal("3000.00"))
    BillingNotice.objects.update(created_at=timezone.now() - billing.BALANCE_WARNING_REARM)
    # The balance set above stands for no top-up here: it is not above what this warning said.
    BillingNotice.objects.filter(cleared_at__isnull=True).update(context={"balance": "3000.00"})
    assert billing.warn_low_balances() == []
    Workspace.objects.filter(pk=workspace_id).update(credit_balance=Decimal("2300.00"))
    assert billing.warn_low_balances() == [f"balance_low:{workspace_id}:24h"]
    assert len([m for m in mailoutbox if "balance is low" in m.subject]) == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_ten_concurrent_metering_runs_post_once(environment, machine_type):
    clusters = [running_cluster(environment, machine_type, machines=2, name=f"c{i}") for i in range(3)]
    barrier = threading.Barrier(10)
    errors = []

    def run():
        try:
            barrier.wait()
            billing.meter_usage(at(3600))
        except Exception as exc:  # noqa: BLE001 - surfaced below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sum(LedgerEntry.objects.filter(kind="usage").values_list("amount", flat=True)) == Decimal("-15.00")
    assert Workspace.objects.get(pk=environment.workspace_id).credit_balance == Decimal("985.00")
    assert set(MachineUsage.objects.values_list("posted_amount", flat=True)) == {Decimal("2.50")}
    assert len(clusters) == 3


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_one_metering_run_takes_the_same_number_of_queries_for_4_or_40_machines(environment, machine_type):
    from django.test.utils import CaptureQueriesContext

    from tests.factories import HostFactory

    HostFactory.create_batch(40, machine_type=machine_type)
    running_cluster(environment, machine_type, machines=4, name="small")
    with CaptureQueriesContext(connection) as small:
        billing.meter_usage(at(600))
    for i in range(9):
        running_cluster(environment, machine_type, machines=4, name=f"big{i}")
    with CaptureQueriesContext(connection) as large:
        billing.meter_usage(at(1200))
    assert len(small.captured_queries) == len(large.captured_queries)
