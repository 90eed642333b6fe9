"""POST /api/v1/clusters/{id}/nodes/{name}/replace, and how the swap shows on the cluster and instances."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accounts.models import Workspace
from clusters.models import Node
from offers.models import Host
from tests.api.conftest import drive, error_of, make_cluster
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db


def test_replace_answers_202_with_the_new_machine_marked_then_the_swap_shows_done(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type, machines=3)
    drive(cluster)
    old = cluster.nodes.get(index=2)

    status, body = api.post(f"/clusters/{cluster.pk}/nodes/node-2/replace")

    assert status == 202
    nodes = [(n["name"], n["replacing"]) for n in body["data"]["nodes"]]
    assert nodes == [("node-0", False), ("node-1", False), ("node-2", False), ("node-2", True)]
    new_id = body["data"]["nodes"][-1]["instance_id"]
    assert body["data"]["machines"] == 3
    instances = api.get("/instances")[1]["data"]
    assert [(i["name"], i["replaces_instance_id"]) for i in instances if i["cluster_id"] == cluster.pk][-2:] == [
        ("node-2", None), ("node-2", old.pk),
    ]
    # Only the machine that is node-2 now is on the Connect card and in the SSH config.
    assert body["data"]["ssh_config"].count(f"Host {cluster.name}-node-2") == 1

    drive(cluster)
    data = api.get(f"/clusters/{cluster.pk}")[1]["data"]
    live = [n for n in data["nodes"] if n["status"] != "stopped"]
    assert [(n["name"], n["instance_id"], n["replacing"], n["status"]) for n in live] == [
        ("node-0", live[0]["instance_id"], False, "ready"), ("node-1", live[1]["instance_id"], False, "ready"),
        ("node-2", new_id, False, "ready"),
    ]
    assert [i["id"] for i in api.get("/instances")[1]["data"] if i["name"] == "node-2"] == [new_id]
    events = [e["event"] for e in api.get(f"/clusters/{cluster.pk}/events")[1]["data"]]
    assert events[-1] == "node_replaced"


def test_replace_refusals_carry_their_codes(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type, machines=2)
    status, body = api.post(f"/clusters/{cluster.pk}/nodes/node-1/replace")
    assert status == 409 and error_of(body)["code"] == "not_ready"
    drive(cluster)
    assert api.post(f"/clusters/{cluster.pk}/nodes/node-7/replace")[0] == 404
    status, body = api.post(f"/clusters/{cluster.pk}/nodes/node-0/replace")
    assert status == 409 and error_of(body)["code"] == "head_replace_refused"
    assert api.post(f"/clusters/{cluster.pk}/nodes/node-1/replace")[0] == 202
    status, body = api.post(f"/clusters/{cluster.pk}/nodes/node-1/replace")
    assert status == 409 and error_of(body)["code"] == "replacement_in_progress"


def test_replace_without_a_free_machine_is_409_and_says_so(api, environment):
    machine_type = machine_type_with_hosts(2)
    cluster = make_cluster(environment, machine_type, machines=2)
    drive(cluster)
    status, body = api.post(f"/clusters/{cluster.pk}/nodes/node-1/replace")
    assert status == 409
    error = error_of(body)
    assert error["code"] == "offer_unavailable" and "node-1 keeps running" in error["message"]
    assert not Node.objects.filter(cluster=cluster, replacing__isnull=False).exists()
    assert Host.objects.filter(machine_type=machine_type, state=Host.State.FREE).count() == 0


def test_replace_without_the_balance_for_the_extra_machine_is_402(api, environment, machine_type, workspace):
    cluster = make_cluster(environment, machine_type, machines=3)
    drive(cluster)
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("9.00"))
    status, body = api.post(f"/clusters/{cluster.pk}/nodes/node-1/replace")
    assert status == 402 and error_of(body)["details"]["required"] == "10.00"


def test_another_workspace_cannot_replace_a_node(outsider_api, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, body = outsider_api.post(f"/clusters/{cluster.pk}/nodes/node-1/replace")
    assert status == 404 and error_of(body)["code"] == "not_found"
    assert not Node.objects.filter(cluster=cluster, replacing__isnull=False).exists()
