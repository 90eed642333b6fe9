"""A host whose machine failed a boot, a join or an install leaves sale: a one-click re-create
never lands on it again, nor does another customer's cluster, until an operator clears it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from clusters import lifecycle
from clusters.models import Cluster, Status
from clusters.services.create import create_cluster, recreate_cluster
from clusters.services.progress import retry_install
from clusters.services.terminate import terminate_cluster
from offers import lab
from offers.inventory import free_host_count, list_offers
from offers.models import Host, HostFault
from tests.factories import UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.notifications.conftest import smtp, subject_of  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def create(environment, machine_type, count=2, software="none", name="train") -> Cluster:
    cluster = create_cluster(environment=environment, name=name, machine_type=machine_type, machine_count=count, software=software)
    cluster.refresh_from_db()
    return cluster


@pytest.fixture
def operator(db):
    user = UserFactory(username="ops", email="ops@runcrate.test", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


def test_a_host_that_fails_to_boot_is_quarantined_and_a_recreate_never_lands_on_it(
    environment, operator, smtp
):
    machine_type = machine_type_with_hosts(5)
    bad = machine_type.hosts.order_by("id")[0]
    lab.inject(Host.objects.filter(pk=bad.pk), fault=HostFault.BOOT_FAILS)

    failed = create(environment, machine_type)
    assert failed.status == Status.FAILED
    bad.refresh_from_db()
    assert bad.state == Host.State.QUARANTINED
    assert "did not start" in bad.quarantine_reason
    # The good host of that cluster is back on sale; the bad one is not counted as free.
    assert free_host_count(machine_type) == 4

    # The failed page's "Create train here" (the same offer), and another workspace after it:
    # neither gets the bad host, and both start.
    again = recreate_cluster(failed, machine_type)
    again.refresh_from_db()
    assert again.status == Status.READY
    assert bad.pk not in set(again.nodes.values_list("host_id", flat=True))
    other = create(WorkspaceFactory().default_environment, machine_type, count=2, name="other")
    assert other.status == Status.READY
    assert bad.pk not in set(other.nodes.values_list("host_id", flat=True))
    # Nothing free is left: the offer is not listed, though the quarantined host is idle.
    assert not [o for o in list_offers(machine_type.gpu, 1, include_community=True) if o.machine_type == machine_type]

    # The operators were told, once, by email…
    [mail] = smtp.inbox.to("ops@runcrate.test")
    assert subject_of(mail) == f"Taken out of sale: {bad.name} (a machine failed to start, join or install)"
    # …and in the admin: a filter and a badge.
    page = operator.get(reverse("admin:offers_host_changelist") + "?quarantined=yes").content.decode()
    assert bad.name in page and "Quarantined" in page
    assert machine_type.hosts.exclude(pk=bad.pk)[0].name not in page

    # Clearing the fault alone does not return it to sale; the operator's action does.
    lab.inject(Host.objects.filter(pk=bad.pk), fault=HostFault.NONE)
    bad.refresh_from_db()
    assert bad.state == Host.State.QUARANTINED
    response = operator.post(
        reverse("admin:offers_host_changelist"), {"action": "return_to_sale", "_selected_action": [bad.pk]}
    )
    assert response.status_code == 302
    bad.refresh_from_db()
    assert bad.state == Host.State.FREE and bad.quarantined_at is None


def test_a_host_that_never_joins_is_quarantined(environment, smtp):
    machine_type = machine_type_with_hosts(3)
    bad = machine_type.hosts.order_by("-id")[0]
    lab.inject(Host.objects.filter(pk=bad.pk), fault=HostFault.NEVER_JOINS)
    cluster = create(environment, machine_type, count=3)
    assert cluster.status == Status.PROVISIONING
    # Every machine is up; the bad one never reaches its peers, past the deadline.
    Cluster.objects.filter(pk=cluster.pk).update(deadline_at=timezone.now())
    lifecycle.advance(cluster.pk)
    cluster.refresh_from_db()
    assert cluster.status == Status.FAILED
    states = dict(machine_type.hosts.values_list("pk", "state"))
    assert states.pop(bad.pk) == Host.State.QUARANTINED
    assert set(states.values()) == {Host.State.FREE}


def test_a_host_whose_install_failed_leaves_sale_when_its_degraded_cluster_lets_it_go(environment, smtp):
    machine_type = machine_type_with_hosts(3)
    bad = machine_type.hosts.order_by("id")[0]
    lab.inject(Host.objects.filter(pk=bad.pk), fault=HostFault.INSTALL_FAILS)
    cluster = create(environment, machine_type, software="slurm")
    assert cluster.status == Status.DEGRADED
    bad.refresh_from_db()
    # Still the customer's machine (up and billed) while the cluster lives…
    assert bad.state == Host.State.RESERVED and bad.quarantined_at is not None
    terminate_cluster(cluster)
    bad.refresh_from_db()
    # …and out of sale once it is let go.
    assert bad.state == Host.State.QUARANTINED
    assert Host.objects.filter(state=Host.State.FREE).count() == 2


def test_a_retried_install_that_fails_again_on_a_quarantined_host_emails_the_operators_once(
    environment, operator, smtp
):
    machine_type = machine_type_with_hosts(2)
    bad = machine_type.hosts.order_by("id")[0]
    lab.inject(Host.objects.filter(pk=bad.pk), fault=HostFault.INSTALL_FAILS)
    cluster = create(environment, machine_type, software="slurm")
    retry_install(cluster)
    cluster.refresh_from_db()
    assert cluster.status == Status.DEGRADED
    assert [subject_of(m) for m in smtp.inbox.to("ops@runcrate.test")] == [
        f"Taken out of sale: {bad.name} (a machine failed to start, join or install)"
    ]
