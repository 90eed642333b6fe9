from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from accounts.models import Role
from billing import services as billing
from clusters.models import Cluster, Node, Status
from tests.factories import MembershipFactory, UserFactory

T0 = dt.datetime(2026, 3, 10, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def manager(workspace):
    return MembershipFactory(workspace=workspace, role=Role.MANAGER, user=UserFactory(username="meg")).user


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def running_cluster(environment, machine_type, *, machines: int = 2, started: dt.datetime = T0, name: str = "train",
                    rate: Decimal | None = None) -> Cluster:
    """A ready cluster billed from `started`, built directly (the lifecycle has its own tests)."""
    hosts = list(machine_type.hosts.filter(state="free").order_by("id")[:machines])
    assert len(hosts) == machines, "not enough free hosts"
    cluster = Cluster.objects.create(
        workspace=environment.workspace, environment=environment, name=name, machine_type=machine_type,
        machine_count=machines, price_per_machine_hour=rate or machine_type.price_per_machine_hour,
        provider="simulated", status=Status.READY, status_changed_at=started, deadline_at=started,
        billing_started_at=started, ready_at=started,
    )
    from offers.models import Host

    Host.objects.filter(pk__in=[h.pk for h in hosts]).update(state="reserved")
    nodes = Node.objects.bulk_create(
        [Node(cluster=cluster, index=i, host=h, state=Node.State.READY, billing_started_at=started) for i, h in enumerate(hosts)]
    )
    billing.start_usage(cluster, nodes, started)
    return cluster


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def now() -> dt.datetime:
    return timezone.now()
