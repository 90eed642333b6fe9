"""Node health in the API: each node's health, detail and check time, and the cluster's count
of unhealthy nodes; tenancy as for every cluster read."""

from __future__ import annotations

import pytest

from clusters.node_health import rounds
from clusters.services.create import create_cluster
from offers import lab
from offers.models import Host, HostFault

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def cluster(environment, machine_type, owner):
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=2, created_by=owner,
    )
    return cluster


def test_each_node_carries_its_health_and_the_cluster_counts_the_bad_ones(api, dev_api, cluster):
    status, body = api.get(f"/clusters/{cluster.pk}")
    assert status == 200
    assert [(n["health"], n["health_detail"], n["health_checked_at"]) for n in body["data"]["nodes"]] == [
        ("unknown", None, None), ("unknown", None, None)
    ]
    assert body["data"]["unhealthy_nodes"] == 0

    lab.inject(Host.objects.filter(nodes__cluster=cluster, nodes__index=1), fault=HostFault.NEVER_JOINS)
    rounds.check_cluster(cluster.pk)
    for client in (api, dev_api):
        status, body = client.get(f"/clusters/{cluster.pk}")
        nodes = body["data"]["nodes"]
        assert [n["health"] for n in nodes] == ["healthy", "network_down"]
        assert nodes[1]["health_detail"] == "wg0 is down" and nodes[1]["health_checked_at"].endswith("Z")
        assert nodes[1]["health_changed_at"] == nodes[1]["health_checked_at"]
        assert body["data"]["unhealthy_nodes"] == 1 and body["data"]["status"] == "ready"
    status, listing = api.get("/clusters")
    assert [c["unhealthy_nodes"] for c in listing["data"] if c["id"] == cluster.pk] == [1]


def test_another_workspace_cannot_read_a_clusters_node_health(outsider_api, cluster):
    rounds.check_cluster(cluster.pk)
    status, body = outsider_api.get(f"/clusters/{cluster.pk}")
    assert status == 404 and body["error"]["code"] == "not_found"
