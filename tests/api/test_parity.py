"""What the dashboard does, the API does too: SSH keys, environments with budgets and spend,
workspaces (switched by header), instances, and planning a cluster before paying for it."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accounts.models import Environment, Membership, Role, SSHKey, Workspace
from clusters.models import Cluster
from tests.api.conftest import ApiClient, drive, error_of, make_cluster
from tests.factories import WorkspaceFactory, machine_type_with_hosts

pytestmark = pytest.mark.django_db

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl laptop"


def plan_body(machine_type, **overrides) -> dict:
    return {"name": "train", "offer_id": machine_type.pk, "machines": 2, "software": "none", **overrides}


# -- SSH keys ------------------------------------------------------------------------------------


def test_an_ssh_key_is_added_listed_and_removed(api, workspace):
    status, body = api.post("/ssh-keys", {"name": "laptop", "public_key": ED25519})
    assert status == 201
    key = body["data"]
    assert key["name"] == "laptop" and key["fingerprint"].startswith("SHA256:")
    assert [k["id"] for k in api.get("/ssh-keys")[1]["data"]] == [key["id"]]
    assert api.delete(f"/ssh-keys/{key['id']}")[0] == 200
    assert not SSHKey.objects.filter(workspace=workspace).exists()
    assert api.delete(f"/ssh-keys/{key['id']}")[0] == 404


def test_a_key_that_is_not_a_public_key_is_400_on_public_key(api):
    status, body = api.post("/ssh-keys", {"name": "bad", "public_key": "ssh-ed25519 not-base64 x; rm -rf /"})
    assert status == 400
    assert "public_key" in error_of(body)["details"]


def test_the_same_key_twice_is_400(api):
    api.post("/ssh-keys", {"name": "laptop", "public_key": ED25519})
    status, body = api.post("/ssh-keys", {"name": "again", "public_key": ED25519})
    assert status == 400 and "public_key" in error_of(body)["details"]


def test_another_workspaces_ssh_key_is_neither_listed_nor_deleted(api, outsider_api):
    _, body = outsider_api.post("/ssh-keys", {"name": "theirs", "public_key": ED25519})
    assert api.get("/ssh-keys")[1]["data"] == []
    assert api.delete(f"/ssh-keys/{body['data']['id']}")[0] == 404
    assert SSHKey.objects.filter(pk=body["data"]["id"]).exists()


# -- environments and workspaces -----------------------------------------------------------------


def test_environments_list_budgets_and_month_to_date_spend(api, environment, machine_type):
    from billing.services import meter_cluster

    Environment.objects.create(workspace=environment.workspace, name="staging", monthly_budget=Decimal("50.00"))
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    Cluster.objects.filter(pk=cluster.pk).update(billing_started_at=cluster.billing_started_at)
    import datetime as dt

    from django.utils import timezone

    from billing.models import MachineUsage

    MachineUsage.objects.filter(cluster=cluster).update(started_at=timezone.now() - dt.timedelta(hours=2),
                                                         billed_until=timezone.now() - dt.timedelta(hours=2))
    meter_cluster(cluster.pk)
    status, body = api.get("/environments")
    assert status == 200
    rows = {e["name"]: e for e in body["data"]}
    assert rows["default"]["current"] is True and rows["default"]["is_default"] is True
    assert Decimal(rows["default"]["month_to_date_spend"]) == Decimal("10.00")
    assert Decimal(rows["default"]["budget_remaining"]) == Decimal(rows["default"]["monthly_budget"]) - Decimal("10.00")
    assert rows["staging"]["month_to_date_spend"] == "0.00" and rows["staging"]["monthly_budget"] == "50.00"
    assert ApiClient(api.key, environment="staging").get("/environments")[1]["data"][1]["current"] is True


def test_workspaces_are_listed_and_a_key_acts_only_in_its_own(api, owner, workspace, machine_type):
    other = WorkspaceFactory(name="Lab")
    Membership.objects.create(workspace=other, user=owner, role=Role.DEVELOPER)
    status, body = api.get("/workspaces")
    assert status == 200
    assert {(w["name"], w["role"], w["current"]) for w in body["data"]} == {
        (workspace.name, "owner", True), ("Lab", "developer", False)}
    lab = ApiClient(api.key)
    status, body = lab.call("GET", "/clusters", headers={"X-Workspace": "Lab"})
    assert status == 403 and error_of(body)["code"] == "wrong_workspace"
    status, body = lab.call("POST", "/clusters", plan_body(machine_type), headers={"X-Workspace": str(other.pk)})
    assert status == 403
    assert not Cluster.objects.exists()


def test_a_workspace_the_creator_is_not_in_is_404(api):
    Workspace.objects.create(name="Strangers")
    status, body = api.call("GET", "/clusters", headers={"X-Workspace": "Strangers"})
    assert status == 404 and error_of(body)["code"] == "workspace_not_found"


# -- instances -----------------------------------------------------------------------------------


def test_instances_list_every_machine_marked_with_its_cluster(api, workspace, environment, machine_type):
    staging = Environment.objects.create(workspace=workspace, name="staging")
    first = make_cluster(environment, machine_type, name="first")
    second = make_cluster(staging, machine_type_with_hosts(3), name="second", machines=3)
    status, body = api.get("/instances")
    assert status == 200
    assert sorted((i["cluster_name"], i["name"]) for i in body["data"]) == [
        ("first", "node-0"), ("first", "node-1"), ("second", "node-0"), ("second", "node-1"), ("second", "node-2")]
    assert {i["cluster_id"] for i in body["data"]} == {first.pk, second.pk}
    assert body["meta"]["total"] == 5


def test_terminating_an_instance_is_refused_naming_its_cluster(api, environment, machine_type):
    cluster = make_cluster(environment, machine_type, name="train")
    instance = cluster.nodes.get(index=1)
    status, body = api.delete(f"/instances/{instance.pk}")
    assert status == 409
    error = error_of(body)
    assert error["code"] == "node_terminate_refused"
    assert "'train'" in error["message"] and f"/api/v1/clusters/{cluster.pk}" in error["message"]
    assert error["details"]["cluster_id"] == cluster.pk


def test_another_workspaces_instance_is_404(outsider_api, environment, machine_type):
    instance = make_cluster(environment, machine_type).nodes.first()
    assert outsider_api.get("/instances")[1]["data"] == []
    assert outsider_api.delete(f"/instances/{instance.pk}")[0] == 404


# -- plan ----------------------------------------------------------------------------------------


def test_a_plan_prices_the_cluster_and_reserves_nothing(api, machine_type):
    free_before = machine_type.hosts.filter(state="free").count()
    status, body = api.post("/clusters/plan", plan_body(machine_type))
    assert status == 200
    plan = body["data"]
    assert plan["can_create"] is True and plan["problems"] == []
    assert plan["price_per_hour"] == "5.00" and plan["price_per_machine_hour"] == "2.50"
    assert plan["balance"] == {"credits_balance": "1000.00", "required": "10.00", "covers_one_hour": True}
    assert plan["runway"]["per_hour_after_create"] == "5.00" and plan["runway"]["hours"] == "200.00"
    assert plan["runway"]["under_one_hour"] is False
    assert not Cluster.objects.exists()
    assert machine_type.hosts.filter(state="free").count() == free_before


def test_a_plan_lists_every_refusal_with_its_code(api, workspace):
    container = machine_type_with_hosts(2, kind="container", community=True)
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("3.00"))
    _, volume = api.post("/volumes", {"name": "data", "size_gb": 10})
    status, body = api.post("/clusters/plan", plan_body(
        container, name="Bad Name", machines=3, software="kubernetes", volume_id=volume["data"]["id"]))
    assert status == 200
    plan = body["data"]
    assert plan["can_create"] is False
    assert {(p["code"], p["field"]) for p in plan["problems"]} == {
        ("invalid_name", "name"), ("kubernetes_unsupported", "software"), ("volume_on_community", "volume_id"),
        ("offer_unavailable", "offer_id"), ("insufficient_credits", None),
    }


def test_a_plan_counts_what_already_runs_and_warns_under_one_hour_of_runway(api, workspace, environment):
    # Each cluster passes the rule on its own (one hour of it, at least $10); together they
    # would run the $60 balance out in well under an hour.
    pricey = machine_type_with_hosts(6, price_per_machine_hour=Decimal("23.92"))
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("60.00"))
    make_cluster(environment, pricey, name="one")
    status, body = api.post("/clusters/plan", plan_body(pricey, name="two"))
    plan = body["data"]
    assert plan["can_create"] is True
    assert plan["runway"]["per_hour_after_create"] == "95.68"
    assert plan["runway"]["under_one_hour"] is True
    assert any("lasts 38 minutes" in w for w in plan["warnings"])


def test_a_plan_warns_when_the_budget_left_lasts_under_an_hour(api, workspace, environment, machine_type):
    # $0.01 of the month's budget left: the cluster would be stopped within a minute of ready.
    make_cluster(environment, machine_type, name="one")  # $5/h of the environment's spend
    type(environment).objects.filter(pk=environment.pk).update(monthly_budget=Decimal("2.50"))
    status, body = api.post("/clusters/plan", plan_body(machine_type, name="two"))
    budget = body["data"]["budget"]
    assert status == 200 and body["data"]["can_create"] is True
    assert (budget["per_hour_after_create"], budget["hours"], budget["under_one_hour"]) == ("10.00", "0.25", True)
    assert any("$2.50 left of its monthly budget lasts 15 minutes" in w for w in body["data"]["warnings"])
    type(environment).objects.filter(pk=environment.pk).update(monthly_budget=Decimal("5000"))
    _, body = api.post("/clusters/plan", plan_body(machine_type, name="two"))
    assert body["data"]["budget"]["under_one_hour"] is False
    assert not any("budget" in w for w in body["data"]["warnings"])


def test_kubernetes_on_real_machines_is_refused_until_the_operator_pins_its_manifests(api, settings):
    real = machine_type_with_hosts(2, provider="ssh", kind="bare_metal")
    _, body = api.post("/clusters/plan", plan_body(real, software="kubernetes"))
    assert [(p["code"], p["field"]) for p in body["data"]["problems"]] == [("kubernetes_unavailable", "software")]
    status, body = api.post("/clusters", plan_body(real, software="kubernetes"))
    assert status == 400 and error_of(body)["code"] == "kubernetes_unavailable"
    assert "has not been verified" in error_of(body)["message"] and not Cluster.objects.exists()
    settings.KUBERNETES_FLANNEL_SHA256, settings.KUBERNETES_DEVICE_PLUGIN_SHA256 = "a" * 64, "b" * 64
    _, body = api.post("/clusters/plan", plan_body(real, software="kubernetes"))
    assert body["data"]["can_create"] is True


def test_a_plan_with_an_unknown_offer_says_so_in_problems(api):
    status, body = api.post("/clusters/plan", {"name": "x", "offer_id": 999999, "machines": 2})
    assert status == 200
    assert [p["code"] for p in body["data"]["problems"]] == ["offer_not_found"]


def test_a_plan_needs_the_same_fields_as_create(api):
    status, body = api.post("/clusters/plan", {})
    assert status == 400 and set(error_of(body)["details"]) == {"name", "offer_id", "machines"}
