"""Many simultaneous creates against a few free hosts never double-book (real threads and connections)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from decimal import Decimal

import pytest
from django.db import connection, transaction

from accounts.models import Workspace
from clusters.errors import ClusterError
from clusters.models import LIVE_STATUSES, Cluster, Node
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from offers import lab
from offers.models import Host
from tests.factories import WorkspaceFactory, machine_type_with_hosts

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

THREADS = 12


def create_at_once(jobs: list[dict]) -> list[object]:
    """Run create_cluster for every job in its own thread and connection, all released together."""
    barrier = threading.Barrier(len(jobs))
    results: list[object] = [None] * len(jobs)

    def run(i: int, job: dict) -> None:
        try:
            barrier.wait()
            results[i] = create_cluster(**job)
        except ClusterError as error:
            results[i] = error
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i, job)) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def assert_no_double_booking(machine_type) -> None:
    live_nodes = Node.objects.filter(released_at__isnull=True, cluster__status__in=LIVE_STATUSES)
    held = Counter(live_nodes.values_list("host_id", flat=True))
    assert all(count == 1 for count in held.values()), held
    reserved = Host.objects.filter(machine_type=machine_type, state=Host.State.RESERVED).count()
    sizes = sum(Cluster.objects.filter(status__in=LIVE_STATUSES).values_list("machine_count", flat=True))
    assert reserved == sizes == len(held)


@pytest.fixture
def slow_hosts(db):
    # Hosts that take a while to boot keep every winner live (holding its hosts) while we look.
    machine_type = machine_type_with_hosts(6)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=600)
    return machine_type


def test_twelve_creates_of_two_machines_against_six_hosts(environment, slow_hosts):
    jobs = [
        dict(environment=environment, name=f"race-{i}", machine_type=slow_hosts, machine_count=2)
        for i in range(THREADS)
    ]
    results = create_at_once(jobs)
    winners = [r for r in results if isinstance(r, Cluster)]
    losers = [r for r in results if not isinstance(r, Cluster)]
    assert len(winners) == 3
    assert all(isinstance(r, ClusterError) and r.code == "offer_unavailable" for r in losers), losers
    assert_no_double_booking(slow_hosts)
    assert not Host.objects.filter(machine_type=slow_hosts, state=Host.State.FREE).exists()


def test_mixed_sizes_from_many_workspaces_never_overbook(slow_hosts):
    workspaces = [WorkspaceFactory() for _ in range(THREADS)]
    sizes = [2, 3, 4, 2, 5, 2, 3, 6, 2, 4, 2, 3]
    jobs = [
        dict(environment=ws.default_environment, name="race", machine_type=slow_hosts, machine_count=size)
        for ws, size in zip(workspaces, sizes, strict=True)
    ]
    results = create_at_once(jobs)
    winners = [r for r in results if isinstance(r, Cluster)]
    assert winners, results
    assert sum(c.machine_count for c in winners) <= 6
    assert all(isinstance(r, Cluster) or (isinstance(r, ClusterError) and r.code == "offer_unavailable") for r in results), results
    assert_no_double_booking(slow_hosts)
    # No loser left anything behind.
    assert Cluster.objects.count() == len(winners)


def test_concurrent_creates_and_terminates_keep_the_inventory_consistent(environment, slow_hosts):
    first = create_cluster(environment=environment, name="first", machine_type=slow_hosts, machine_count=6)
    barrier = threading.Barrier(2)
    outcome: dict[str, object] = {}

    def terminate() -> None:
        try:
            barrier.wait()
            outcome["terminated"] = terminate_cluster(Cluster.objects.get(pk=first.pk))
        finally:
            connection.close()

    thread = threading.Thread(target=terminate)
    thread.start()
    second = create_racing(barrier, environment, slow_hosts)
    thread.join()
    assert outcome["terminated"] is True
    # Whichever came first, the second cluster got two of the six hosts or none at all.
    assert isinstance(second, Cluster) or second.code == "offer_unavailable"
    assert_no_double_booking(slow_hosts)


def create_racing(barrier, environment, machine_type):
    barrier.wait()
    try:
        return create_cluster(environment=environment, name="second", machine_type=machine_type, machine_count=2)
    except ClusterError as error:
        return error


def test_two_owners_stepping_down_at_once_leave_one_owner(db):
    from accounts import services as accounts
    from accounts.models import Membership, Role
    from tests.factories import MembershipFactory

    first = MembershipFactory(role=Role.OWNER)
    second = MembershipFactory(workspace=first.workspace, role=Role.OWNER)
    barrier = threading.Barrier(2)
    outcomes: list[object] = [None, None]

    def step_down(i: int, membership: Membership) -> None:
        try:
            barrier.wait()
            accounts.change_role(by=membership, membership=membership, role=Role.MANAGER)
            outcomes[i] = "demoted"
        except Exception as exc:  # noqa: BLE001 - reported by the assertions below
            outcomes[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=step_down, args=(i, m)) for i, m in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count("demoted") == 1, outcomes
    assert any(isinstance(outcome, accounts.ValidationError) for outcome in outcomes), outcomes
    assert Membership.objects.filter(workspace=first.workspace, role=Role.OWNER).count() == 1


def test_twelve_simultaneous_creates_with_one_name_make_exactly_one_cluster(db):
    machine_type = machine_type_with_hosts(2 * THREADS)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=600)
    environment = WorkspaceFactory(credit_balance=100000).default_environment
    job = {"environment": environment, "name": "same", "machine_type": machine_type, "machine_count": 2}

    results = create_at_once([job] * THREADS)

    assert Cluster.objects.filter(environment=environment, name="same").count() == 1
    refusals = [r for r in results if not isinstance(r, Cluster)]
    assert len(refusals) == THREADS - 1
    errors = [r for r in refusals if isinstance(r, ClusterError)]
    assert errors == refusals, refusals
    assert {(type(r).__name__, r.code, r.status, r.field) for r in errors} == {("Conflict", "name_taken", 409, "name")}
    assert_no_double_booking(machine_type)


def test_a_create_queues_for_the_workspace_lock_holding_its_machines_and_a_refusal_there_frees_them(environment, slow_hosts):
    """The workspace lock serialises only the money and quota checks and the commit: a create
    that waits for it has already reserved its machines (so creates of one workspace do not
    queue for each other's whole transaction), and a refusal under the lock gives them back."""
    workspace_id = environment.workspace_id
    held, release = threading.Event(), threading.Event()
    outcome: list[object] = []

    def hold_the_workspace_then_spend_the_balance() -> None:
        try:
            with transaction.atomic():
                Workspace.objects.select_for_update().get(pk=workspace_id)
                held.set()
                release.wait(60)
                Workspace.objects.filter(pk=workspace_id).update(credit_balance=Decimal("0"))
        finally:
            connection.close()

    def create() -> None:
        try:
            outcome.append(create_cluster(environment=environment, name="queued", machine_type=slow_hosts,
                                          machine_count=2))
        except Exception as error:  # noqa: BLE001 - reported by the assertions below
            outcome.append(error)
        finally:
            connection.close()

    def waiting_for_the_workspace() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND wait_event_type = 'Lock' AND query LIKE '%%FROM \"accounts_workspace\"%%FOR UPDATE%%'")
            return cursor.fetchone()[0] > 0

    def free_to_another_create() -> int:
        # Asked only once the create waits for the lock: this takes the free hosts for a moment.
        with transaction.atomic():
            return len(Host.objects.select_for_update(skip_locked=True).filter(machine_type=slow_hosts, state=Host.State.FREE))

    holder = threading.Thread(target=hold_the_workspace_then_spend_the_balance)
    holder.start()
    assert held.wait(30)
    creator = threading.Thread(target=create)
    creator.start()
    try:
        deadline = time.monotonic() + 30
        while not waiting_for_the_workspace() and time.monotonic() < deadline and creator.is_alive():
            time.sleep(0.05)
        free_while_queued = free_to_another_create()
        still_queued = creator.is_alive()
    finally:
        release.set()
        holder.join()
        creator.join()

    assert still_queued and free_while_queued == 4, (outcome, free_while_queued)
    [refusal] = outcome
    assert isinstance(refusal, ClusterError) and refusal.code == "insufficient_credits", refusal
    assert not Cluster.objects.filter(environment=environment).exists()
    assert Host.objects.filter(machine_type=slow_hosts, state=Host.State.FREE).count() == 6
