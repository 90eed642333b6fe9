"""Quotas per member, role and environment: every way of adding machines checks them under the
workspace lock, refuses with the limit, what is in use and who can raise it, and a reached spend
quota never stops a running cluster."""

from __future__ import annotations

import datetime as dt
import threading
from decimal import Decimal

import pytest
from django.core.exceptions import PermissionDenied
from django.db import connection
from django.utils import timezone

from accounts import services as accounts
from accounts.models import Environment, Membership, Quota, Role
from audit.models import AuditEvent
from billing.models import MachineUsage
from billing.services import meter_cluster
from clusters.enforcement import meter_and_enforce
from clusters.errors import ClusterError
from clusters.models import LIVE_STATUSES, Cluster, Node, Status
from clusters.services.create import create_cluster, plan_cluster
from clusters.services.replace import replace_node
from clusters.services.workers import add_workers
from offers import lab
from offers.models import Host
from tests.factories import MembershipFactory, UserFactory, machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def owner_membership(owner, workspace) -> Membership:
    return Membership.objects.get(user=owner, workspace=workspace)


@pytest.fixture
def dev_membership(developer, workspace) -> Membership:
    return Membership.objects.get(user=developer, workspace=workspace)


def create(environment, machine_type, user, name: str, machines: int = 2) -> Cluster:
    cluster = create_cluster(environment=environment, name=name, machine_type=machine_type, machine_count=machines,
                             created_by=user)
    cluster.refresh_from_db()
    return cluster


def refusal(call) -> ClusterError:
    with pytest.raises(ClusterError) as caught:
        call()
    return caught.value


def test_a_create_past_a_members_gpu_quota_is_refused_saying_the_limit_the_use_and_who_raises_it(
        environment, machine_type, developer, owner_membership, dev_membership):
    accounts.set_quota(by=owner_membership, membership=dev_membership, max_gpus=24)
    create(environment, machine_type, developer, "first")  # 2 machines × 8 GPUs
    error = refusal(lambda: create(environment, machine_type, developer, "second"))
    assert error.code == "quota_gpus" and error.status == 403
    assert "quota of dave in every environment is 24 GPUs" in error.message
    assert "16 are running" in error.message and "16 more GPUs" in error.message
    assert "An Owner of the workspace can raise it" in error.message
    assert error.details == {"quota_id": Quota.objects.get().pk, "limit": 24, "in_use": 16, "requested": 16}
    assert list(Cluster.objects.values_list("name", flat=True)) == ["first"]
    assert Host.objects.filter(machine_type=machine_type, state=Host.State.RESERVED).count() == 2
    # The plan said so before anything was reserved.
    plan = plan_cluster(environment=environment, name="second", machine_type=machine_type, machine_count=2,
                        created_by_id=developer.pk)
    assert [p.code for p in plan.problems] == ["quota_gpus"]
    [use] = plan.quotas
    assert (use.gpus_in_use, use.gpus_after, use.quota.max_gpus) == (16, 32, 24)


def test_a_role_quota_binds_each_member_alone_and_a_members_own_quota_replaces_it(
        workspace, environment, owner, developer, owner_membership, dev_membership):
    machine_type = machine_type_with_hosts(10)
    erin = MembershipFactory(workspace=workspace, role=Role.DEVELOPER, user=UserFactory(username="erin"))
    accounts.set_quota(by=owner_membership, role=Role.DEVELOPER, max_gpus=16)
    create(environment, machine_type, developer, "dave-1")
    create(environment, machine_type, erin.user, "erin-1")  # each developer has 16 of their own
    assert refusal(lambda: create(environment, machine_type, developer, "dave-2")).code == "quota_gpus"
    create(environment, machine_type, owner, "owner-1")  # Owners are no Developers
    accounts.set_quota(by=owner_membership, membership=dev_membership, max_gpus=32)
    assert create(environment, machine_type, developer, "dave-2").status == Status.READY
    assert refusal(lambda: create(environment, machine_type_with_hosts(2), erin.user, "erin-2")).code == "quota_gpus"


def test_an_environment_quota_counts_everyone_there_and_nothing_elsewhere(
        workspace, environment, machine_type, owner, developer, owner_membership):
    staging = Environment.objects.create(workspace=workspace, name="staging")
    accounts.set_quota(by=owner_membership, environment=staging, max_gpus=16)
    create(staging, machine_type, owner, "a")
    error = refusal(lambda: create(staging, machine_type, developer, "b"))
    assert error.code == "quota_gpus" and "everyone together in environment staging is 16 GPUs" in error.message
    assert create(environment, machine_type, developer, "b").status == Status.READY


def test_adding_workers_and_replacing_a_node_count_against_the_creators_quota(
        environment, developer, owner_membership, dev_membership):
    machine_type = machine_type_with_hosts(5)
    cluster = create(environment, machine_type, developer, "grow", machines=3)
    quota = accounts.set_quota(by=owner_membership, membership=dev_membership, max_gpus=24)
    error = refusal(lambda: add_workers(cluster, 1))
    assert error.code == "quota_gpus" and "24 running" not in error.message and "24 are running" in error.message
    # While the new machine runs beside the old one, both count.
    assert refusal(lambda: replace_node(cluster, "node-1")).code == "quota_gpus"
    assert Node.objects.filter(cluster=cluster, released_at__isnull=True).count() == 3
    accounts.set_quota(by=owner_membership, membership=dev_membership, max_gpus=32)
    assert replace_node(cluster, "node-1").replacing is not None
    quota.refresh_from_db()
    assert quota.max_gpus == 32


def spend(cluster: Cluster, hours: int) -> None:
    """Bill `hours` of the cluster's machines now, through metering."""
    start = timezone.now() - dt.timedelta(hours=hours)
    MachineUsage.objects.filter(cluster=cluster).update(started_at=start, billed_until=start)
    meter_cluster(cluster.pk)


def test_a_reached_spend_quota_refuses_new_machines_warns_and_never_stops_running_clusters(
        environment, machine_type, developer, owner_membership, dev_membership):
    running = create(environment, machine_type, developer, "running")
    spend(running, 2)  # 2 machines × $2.50 × 2 h
    accounts.set_quota(by=owner_membership, membership=dev_membership, monthly_spend=Decimal("10.00"))
    error = refusal(lambda: create(environment, machine_type, developer, "more"))
    assert error.code == "quota_spend"
    assert "$10.00 of spend a month" in error.message and "$10.00 is spent this month" in error.message
    assert refusal(lambda: add_workers(running, 1)).code == "quota_spend"
    plan = plan_cluster(environment=environment, name="more", machine_type=machine_type, machine_count=2,
                        created_by_id=developer.pk)
    assert any("Running clusters keep running" in w for w in plan.money_warnings)
    meter_and_enforce()
    running.refresh_from_db()
    assert running.status == Status.READY


def test_a_spend_quota_an_hour_of_the_new_cluster_would_reach_is_a_warning_not_a_refusal(
        environment, machine_type, developer, owner_membership, dev_membership):
    accounts.set_quota(by=owner_membership, membership=dev_membership, monthly_spend=Decimal("4.00"))
    plan = plan_cluster(environment=environment, name="next", machine_type=machine_type, machine_count=2,
                        created_by_id=developer.pk)
    assert plan.can_create
    assert any("reached within the hour" in w for w in plan.money_warnings)


@pytest.mark.postgres
def test_two_creates_at_once_cannot_both_fit_under_one_quota(environment, developer, owner_membership, dev_membership):
    machine_type = machine_type_with_hosts(6)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=600)
    accounts.set_quota(by=owner_membership, membership=dev_membership, max_gpus=16)
    barrier = threading.Barrier(3)
    results: list[object] = [None] * 3

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = create_cluster(environment=environment, name=f"c{i}", machine_type=machine_type,
                                        machine_count=2, created_by=developer)
        except ClusterError as error:
            results[i] = error.code
        finally:
            connection.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(str(r) if isinstance(r, str) else "created" for r in results) == ["created", "quota_gpus", "quota_gpus"]
    assert Cluster.objects.filter(status__in=LIVE_STATUSES).count() == 1


def test_only_an_owner_sets_quotas_and_each_change_is_in_the_audit_log(
        workspace, owner_membership, dev_membership):
    with pytest.raises(PermissionDenied):
        accounts.set_quota(by=dev_membership, membership=dev_membership, max_gpus=1000)
    quota = accounts.set_quota(by=owner_membership, membership=dev_membership, max_gpus=8)
    accounts.set_quota(by=owner_membership, membership=dev_membership, max_gpus=16, monthly_spend=Decimal("50"))
    assert Quota.objects.count() == 1
    accounts.delete_quota(by=owner_membership, quota=quota)
    assert not Quota.objects.exists()
    entries = list(AuditEvent.objects.filter(workspace=workspace, action__startswith="quota.").order_by("id"))
    assert [e.action for e in entries] == ["quota.set", "quota.set", "quota.delete"]
    assert entries[1].changes == {"max_gpus": [8, 16], "monthly_spend": [None, "50"]}
    assert entries[0].object_label == "dave in every environment"
