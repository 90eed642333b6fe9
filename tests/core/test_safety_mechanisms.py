"""One test per safety mechanism, each failing when that one mechanism is removed: the row lock
and SKIP LOCKED of host reservation, SKIP LOCKED of metering, the workspace lock on create, and
the 64-machine bound on create and on adding workers. Real threads, real PostgreSQL connections;
a transaction held open in one thread is what the other one must not wait for, or must wait for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from decimal import Decimal
from typing import Generic, TypeVar

import pytest
from django.db import connection, transaction

from accounts.models import Workspace
from billing import ledger
from billing import services as billing
from clusters import rules
from clusters.errors import ClusterError
from clusters.models import Cluster, Status
from clusters.services.create import create_cluster
from clusters.services.workers import add_workers
from offers import inventory
from tests.billing.conftest import at, running_cluster
from tests.factories import machine_type_with_hosts

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

T = TypeVar("T")


class Held(Generic[T]):
    """Runs `work` in its own thread and connection inside a transaction it keeps open until release()."""

    result: T  # set by the thread before `ready`

    def __init__(self, work: Callable[[], T]) -> None:
        self.work = work
        self.ready, self.released = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with transaction.atomic():
                self.result = self.work()
                self.ready.set()
                self.released.wait(20)
        finally:
            self.ready.set()
            connection.close()

    def __enter__(self) -> Held[T]:
        self.thread.start()
        assert self.ready.wait(20)
        return self

    def __exit__(self, *exc: object) -> None:
        self.released.set()
        self.thread.join(20)


def without_waiting(work: Callable[[], T]) -> T:
    """`work` in a transaction that gives up on any row lock after a second (LockNotAvailable)."""
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SET LOCAL lock_timeout = '1000ms'")
        return work()


def test_a_host_held_by_an_open_reservation_is_not_reserved_again(db):
    machine_type = machine_type_with_hosts(2)
    with Held(lambda: inventory.reserve_hosts(machine_type, 2)) as first:
        assert first.result is not None and len(first.result) == 2
        # The rows are locked: another reservation neither takes them nor waits for them.
        assert without_waiting(lambda: inventory.reserve_hosts(machine_type, 2)) is None


def test_concurrent_reservations_take_different_free_hosts_without_queueing(db):
    machine_type = machine_type_with_hosts(4)
    with Held(lambda: inventory.reserve_hosts(machine_type, 2)) as first:
        second = without_waiting(lambda: inventory.reserve_hosts(machine_type, 2))
    assert second is not None and len(second) == 2
    assert first.result is not None
    assert {h.pk for h in first.result}.isdisjoint({h.pk for h in second})


def test_a_metering_run_skips_the_machines_another_run_holds_and_meters_the_rest(environment):
    held = running_cluster(environment, machine_type_with_hosts(2), name="held", started=at(0))
    other = running_cluster(environment, machine_type_with_hosts(2), name="other", started=at(0))
    with Held(lambda: list(billing._due_usages(at(3600), held.pk))):
        run = without_waiting(lambda: billing.meter_usage(at(3600)))  # it fails if it waits for the held rows
    assert run.machines == 2
    assert run.posted == 2 * other.price_per_machine_hour
    assert not held.usages.filter(billed_until__gt=at(0)).exists()


def test_a_create_waits_for_a_balance_change_in_flight_and_checks_the_new_balance(environment, workspace):
    machine_type = machine_type_with_hosts(2)  # $5.00 an hour: a create needs $10.00
    debit = dict(workspace_id=workspace.pk, kind="adjustment", amount=Decimal("-995.00"), idempotency_key="drain",
                 description="drained")
    outcome: dict[str, object] = {}

    def create() -> None:
        try:
            outcome["result"] = create_cluster(environment=environment, name="late", machine_type=machine_type,
                                                        machine_count=2)
        except ClusterError as error:
            outcome["result"] = error
        finally:
            connection.close()

    with Held(lambda: ledger.post_entry(**debit)):
        creator = threading.Thread(target=create)
        creator.start()
        creator.join(0.7)
        # The create queues behind the workspace lock the debit holds.
        assert creator.is_alive() and "result" not in outcome
    creator.join(20)
    assert isinstance(outcome["result"], ClusterError) and outcome["result"].code == "insufficient_credits"
    assert Workspace.objects.get(pk=workspace.pk).credit_balance == Decimal("5.00")
    assert not Cluster.objects.exists()


def test_a_create_of_exactly_the_maximum_is_accepted_and_one_more_is_refused(environment):
    machine_type = machine_type_with_hosts(rules.MAX_MACHINES + 1)
    with pytest.raises(ClusterError) as too_many:
        create_cluster(environment=environment, name="too-big", machine_type=machine_type,
                                machine_count=rules.MAX_MACHINES + 1)
    assert too_many.value.code == "invalid_machine_count"
    cluster = create_cluster(environment=environment, name="biggest", machine_type=machine_type,
                                      machine_count=rules.MAX_MACHINES)
    assert cluster.nodes.count() == rules.MAX_MACHINES


def test_workers_fill_a_cluster_up_to_the_maximum_and_not_past_it(environment):
    machine_type = machine_type_with_hosts(rules.MAX_MACHINES + 1)
    cluster = running_cluster(environment, machine_type, machines=rules.MAX_MACHINES - 2, started=at(0))
    with pytest.raises(ClusterError) as past:
        add_workers(cluster, 3)
    assert past.value.code == "invalid_count"
    add_workers(cluster, 2)
    cluster.refresh_from_db()
    assert cluster.machine_count == rules.MAX_MACHINES and cluster.status == Status.READY
    with pytest.raises(ClusterError) as one_more:
        add_workers(cluster, 1)
    assert one_more.value.code == "invalid_count"
