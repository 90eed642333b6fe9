"""`runcrate clusters info` shows what the health check last found on each node."""

from __future__ import annotations

import pytest

from clusters.node_health import rounds
from offers import lab
from offers.models import Host, HostFault
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)


def test_info_lists_each_nodes_health_and_why_a_bad_one_is_bad(cli):
    offer = machine_type_with_hosts(2)
    cluster_id = cli("clusters", "create", "--name", "train", "--offer", str(offer.pk), "--machines", "2", "-q").stdout.strip()
    assert "HEALTH" in cli("clusters", "info", cluster_id).stdout
    lab.inject(Host.objects.filter(nodes__cluster_id=int(cluster_id), nodes__index=1), fault=HostFault.NEVER_JOINS)
    rounds.check_cluster(int(cluster_id))
    # The nodes table (its header names HEALTH); the ssh lines follow in a table of their own.
    tables = cli("clusters", "info", cluster_id).stdout.split("\n\n")
    lines = next(table for table in tables if "HEALTH" in table).splitlines()
    assert [line.split()[-1] for line in lines if line.startswith("node-0")] == ["healthy"]
    assert [line for line in lines if line.startswith("node-1")][0].endswith("network_down: wg0 is down")
