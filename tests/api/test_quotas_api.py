"""Quotas over the API: an Owner sets, lists and removes them; the plan shows them; a create past
one is refused (403) with the limit, the use and who can raise it."""

from __future__ import annotations

import pytest

from accounts.models import Membership, Quota
from audit.models import AuditEvent
from clusters.models import Cluster
from tests.api.conftest import drive, error_of, make_cluster

pytestmark = pytest.mark.django_db


def body(machine_type, name: str = "train") -> dict:
    return {"name": name, "offer_id": machine_type.pk, "machines": 2, "software": "none"}


def test_an_owner_sets_lists_changes_and_removes_a_members_quota(api, workspace, developer):
    member = Membership.objects.get(user=developer)
    status, created = api.call("PUT", "/quotas", {"member_id": member.pk, "max_gpus": 16, "monthly_spend": "200"})
    assert status == 200, created
    quota = created["data"]
    assert quota["applies_to"] == "dave" and quota["environment"] is None
    assert quota["max_gpus"] == 16 and quota["monthly_spend"] == "200.00"
    assert quota["in_use"] == [{"who": "dave", "gpus_running": 0, "spent_this_month": "0.00"}]
    status, changed = api.call("PUT", "/quotas", {"member_id": member.pk, "max_gpus": 24})
    assert changed["data"]["id"] == quota["id"] and changed["data"]["monthly_spend"] is None
    assert [q["id"] for q in api.get("/quotas")[1]["data"]] == [quota["id"]]
    assert api.delete(f"/quotas/{quota['id']}")[0] == 200
    assert not Quota.objects.exists()
    assert list(AuditEvent.objects.filter(action__startswith="quota.").order_by("id").values_list("action", "surface")) == [
        ("quota.set", "api"), ("quota.set", "api"), ("quota.delete", "api")]


def test_a_developer_reads_quotas_but_cannot_set_or_remove_them(api, dev_api, developer):
    member = Membership.objects.get(user=developer)
    status, refused = dev_api.call("PUT", "/quotas", {"member_id": member.pk, "max_gpus": 1000})
    assert status == 403 and "Owner" in error_of(refused)["message"]
    quota_id = api.call("PUT", "/quotas", {"role": "developer", "max_gpus": 8})[1]["data"]["id"]
    assert dev_api.get("/quotas")[1]["data"][0]["applies_to"] == "each Developer"
    assert dev_api.delete(f"/quotas/{quota_id}")[0] == 403
    assert Quota.objects.filter(pk=quota_id).exists()


def test_bad_quota_input_is_400_on_its_fields(api, developer, outsider):
    member = Membership.objects.get(user=developer)
    cases = [
        ({"member_id": member.pk}, "max_gpus"),
        ({"member_id": member.pk, "role": "developer", "max_gpus": 1}, "role"),
        ({"role": "emperor", "max_gpus": 1}, "role"),
        ({"max_gpus": -1}, "max_gpus"),
        ({"monthly_spend": "lots"}, "monthly_spend"),
        ({"member_id": Membership.objects.get(user=outsider).pk, "max_gpus": 1}, "member_id"),
        ({"environment_id": 999999, "max_gpus": 1}, "environment_id"),
    ]
    for sent, field in cases:
        status, answer = api.call("PUT", "/quotas", sent)
        assert status == 400, (sent, answer)
        assert field in error_of(answer)["details"], (sent, answer)
    assert api.delete("/quotas/999999")[0] == 404


def test_the_plan_shows_the_quota_and_a_create_past_it_is_refused(api, environment, machine_type, owner):
    api.call("PUT", "/quotas", {"max_gpus": 24})  # everyone together, every environment
    drive(make_cluster(environment, machine_type, name="first"))
    status, planned = api.post("/clusters/plan", body(machine_type))
    assert status == 200
    plan = planned["data"]
    assert plan["can_create"] is False and [p["code"] for p in plan["problems"]] == ["quota_gpus"]
    assert plan["quotas"] == [{"id": Quota.objects.get().pk, "applies_to": "everyone together in every environment",
                               "max_gpus": 24, "gpus_in_use": 16, "gpus_after_create": 32, "monthly_spend": None,
                               "spent": "0.00"}]
    status, refused = api.post("/clusters", body(machine_type))
    error = error_of(refused)
    assert status == 403 and error["code"] == "quota_gpus"
    assert "24 GPUs" in error["message"] and "16 are running" in error["message"] and "Owner" in error["message"]
    assert error["details"]["limit"] == 24 and error["details"]["in_use"] == 16
    assert Cluster.objects.count() == 1
    cluster = Cluster.objects.get()
    status, refused = api.post(f"/clusters/{cluster.pk}/workers", {"count": 2})
    assert (status, error_of(refused)["code"]) == (403, "quota_gpus")
