"""A degraded cluster: its machines stay up and billed; the customer can replace the machine
whose install failed, retry the install, or terminate; one email per degradation."""

from __future__ import annotations

import pytest

from clusters.models import Cluster, Node, Status
from clusters.services.create import create_cluster
from clusters.services.progress import retry_install
from clusters.services.replace import replace_node
from offers import lab
from offers.models import Host, HostFault
from tests.factories import machine_type_with_hosts
from tests.notifications.conftest import smtp, subject_of  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db(transaction=True)


def degraded_cluster(environment, owner, hosts: int = 4) -> tuple[Cluster, Host]:
    machine_type = machine_type_with_hosts(hosts)
    bad = machine_type.hosts.order_by("id")[1]
    lab.inject(Host.objects.filter(pk=bad.pk), fault=HostFault.INSTALL_FAILS)
    cluster = create_cluster(environment=environment, name="deg", machine_type=machine_type, machine_count=3,
                             software="slurm", created_by=owner)
    cluster.refresh_from_db()
    assert cluster.status == Status.DEGRADED
    return cluster, bad


def test_the_machine_whose_install_failed_can_be_replaced_then_the_retry_reaches_ready(environment, owner):
    cluster, bad = degraded_cluster(environment, owner)
    broken = cluster.nodes.get(host=bad)
    assert broken.name == "node-1" and broken.state == Node.State.INSTALL_FAILED
    assert cluster.can_replace_nodes

    new = replace_node(cluster, "node-1", actor="alice")
    new.refresh_from_db()
    cluster.refresh_from_db()
    assert new.host_id != bad.pk and new.released_at is None and new.replacing_id is None
    assert cluster.status == Status.DEGRADED, "the customer's retry finishes it"
    assert cluster.nodes.get(pk=broken.pk).released_at is not None
    assert "Retry the Slurm install to finish the cluster." in cluster.events.get(event="node_replaced").message

    retry_install(cluster, actor="alice")
    cluster.refresh_from_db()
    assert cluster.status == Status.READY


def test_a_retry_that_fails_again_sends_no_second_email(environment, owner, smtp):
    cluster, _ = degraded_cluster(environment, owner)
    retry_install(cluster, actor="alice")
    retry_install(Cluster.objects.get(pk=cluster.pk), actor="alice")
    cluster.refresh_from_db()
    assert cluster.status == Status.DEGRADED and cluster.install_attempts == 2
    degraded = [subject_of(m) for m in smtp.inbox.to(owner.email) if "degraded" in subject_of(m)]
    assert degraded == ["Your cluster deg is degraded: Slurm failed to install"]
    # Each attempt is still in the Events list.
    assert cluster.events.filter(event="degraded").count() == 3
