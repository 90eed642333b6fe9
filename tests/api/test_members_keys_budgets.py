"""Members, invitations, API keys and budgets through the API: the dashboard's actions with the
dashboard's role checks and messages (the same services and forms)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from accounts.models import Environment, Invitation, Membership, Role
from api.keys import create_api_key
from api.models import ApiKey
from tests.api.conftest import ApiClient, error_of
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


def patch(client: ApiClient, path: str, body: dict):
    return client.call("PATCH", path, body)


def test_members_are_listed_with_roles_and_the_caller_marked(api, dev_api, owner, developer):
    status, body = api.get("/members")
    assert status == 200
    rows = {m["username"]: m for m in body["data"]}
    assert rows[owner.username]["role"] == "owner" and rows[owner.username]["you"] is True
    assert rows[developer.username]["role"] == "developer" and rows[developer.username]["you"] is False
    assert dev_api.get("/members")[0] == 200


def test_only_the_owner_changes_roles_and_one_owner_stays(api, dev_api, workspace, owner, developer):
    member = Membership.objects.get(workspace=workspace, user=developer)
    status, body = dev_api.call("PATCH", f"/members/{member.pk}", {"role": "owner"})
    assert status == 403 and "Only the Owner changes roles" in error_of(body)["message"]
    status, body = patch(api, f"/members/{member.pk}", {"role": "manager"})
    assert status == 200 and body["data"]["role"] == "manager"
    status, body = patch(api, f"/members/{member.pk}", {"role": "emperor"})
    assert status == 400 and "role" in error_of(body)["details"]
    me = Membership.objects.get(workspace=workspace, user=owner)
    status, body = patch(api, f"/members/{me.pk}", {"role": "developer"})
    assert status == 400 and error_of(body)["details"]["role"] == ["A workspace keeps at least one Owner."]


def test_removing_a_member_revokes_their_keys_for_good(api, workspace, developer, developer_key):
    member = Membership.objects.get(workspace=workspace, user=developer)
    status, body = api.delete(f"/members/{member.pk}")
    assert status == 200 and body["data"]["username"] == developer.username
    assert ApiClient(developer_key).get("/clusters")[0] == 401
    assert ApiKey.objects.get(created_by=developer).revoked_at is not None


def test_a_developer_cannot_remove_or_invite(dev_api, workspace, owner):
    member = Membership.objects.get(workspace=workspace, user=owner)
    assert dev_api.delete(f"/members/{member.pk}")[0] == 403
    assert dev_api.post("/invitations", {"email": "new@example.com"})[0] == 403
    assert dev_api.get("/invitations")[0] == 403


def test_invitations_are_created_listed_and_revoked(api, workspace):
    status, body = api.post("/invitations", {"email": "New@Example.com", "role": "manager"})
    assert status == 201 and body["data"]["role"] == "manager" and body["data"]["status"] == "pending"
    invitation_id = body["data"]["id"]
    assert [i["id"] for i in api.get("/invitations")[1]["data"]] == [invitation_id]
    status, body = api.post("/invitations", {"email": "new@example.com"})
    assert status == 400 and "pending invitation" in error_of(body)["details"]["email"][0]
    status, body = api.delete(f"/invitations/{invitation_id}")
    assert status == 200 and body["data"]["status"] == "revoked"
    assert Invitation.objects.get(pk=invitation_id).status == "revoked"
    status, body = api.delete(f"/invitations/{invitation_id}")
    assert status == 400 and error_of(body)["message"] == "This invitation was already accepted or revoked."
    assert api.get("/invitations")[1]["data"] == []


def test_an_invitation_needs_a_real_address_and_a_manager_cannot_make_an_owner(api, workspace):
    status, body = api.post("/invitations", {"email": "not an address"})
    assert status == 400 and "email" in error_of(body)["details"]
    manager = MembershipFactory(workspace=workspace, role=Role.MANAGER, user=UserFactory(username="mia")).user
    manager_api = ApiClient(create_api_key(workspace=workspace, created_by=manager, name="m")[1])
    status, body = manager_api.post("/invitations", {"email": "boss@example.com", "role": "owner"})
    assert status == 400 and error_of(body)["details"]["role"] == ["Only the Owner can make another Owner."]


def test_api_keys_are_made_listed_deactivated_and_deleted(api, owner_key):
    status, body = api.post("/api-keys", {"name": "laptop"})
    assert status == 201 and body["data"]["key"].startswith("rc_live_") and body["data"]["can_manage"] is True
    new_key, key_id = body["data"]["key"], body["data"]["id"]
    assert ApiClient(new_key).get("/clusters")[0] == 200
    listed = api.get("/api-keys")[1]["data"]
    assert key_id in [k["id"] for k in listed] and all("key" not in k for k in listed)
    status, body = patch(api, f"/api-keys/{key_id}", {"is_active": False})
    assert status == 200 and body["data"]["is_active"] is False
    assert ApiClient(new_key).get("/clusters")[0] == 401
    assert patch(api, f"/api-keys/{key_id}", {"is_active": True})[1]["data"]["is_active"] is True
    assert api.delete(f"/api-keys/{key_id}")[0] == 200
    assert ApiClient(new_key).get("/clusters")[0] == 401


def test_a_developer_manages_only_their_own_keys(dev_api, owner_key, owner, workspace):
    owners_key = ApiKey.objects.get(created_by=owner)
    rows = {k["id"]: k for k in dev_api.get("/api-keys")[1]["data"]}
    assert rows[owners_key.pk]["can_manage"] is False
    assert dev_api.delete(f"/api-keys/{owners_key.pk}")[0] == 404
    assert patch(dev_api, f"/api-keys/{owners_key.pk}", {"is_active": False})[0] == 404
    assert ApiKey.objects.get(pk=owners_key.pk).is_active


def test_a_revoked_key_cannot_be_reactivated(api, workspace, developer, developer_key):
    key = ApiKey.objects.get(created_by=developer)
    Membership.objects.filter(workspace=workspace, user=developer).delete()
    from api.keys import revoke_member_keys

    revoke_member_keys(workspace_id=workspace.pk, user_id=developer.pk)
    status, body = patch(api, f"/api-keys/{key.pk}", {"is_active": True})
    assert status == 400 and "revoked when its creator left" in error_of(body)["message"]


def test_budgets_are_set_by_owners_and_managers_only(api, dev_api, environment):
    status, body = patch(api, f"/environments/{environment.pk}", {"monthly_budget": "250.50"})
    assert status == 200 and body["data"]["monthly_budget"] == "250.50"
    assert Environment.objects.get(pk=environment.pk).monthly_budget == Decimal("250.50")
    status, body = patch(api, f"/environments/{environment.pk}", {"monthly_budget": 300})
    assert status == 200 and body["data"]["monthly_budget"] == "300.00"
    status, body = patch(api, f"/environments/{environment.pk}", {"monthly_budget": "١٢"})
    assert status == 400 and "digits 0-9" in error_of(body)["details"]["monthly_budget"][0]
    status, body = patch(api, f"/environments/{environment.pk}", {"monthly_budget": "-5"})
    assert status == 400 and "monthly_budget" in error_of(body)["details"]
    status, body = patch(dev_api, f"/environments/{environment.pk}", {"monthly_budget": "1"})
    assert status == 403 and "Only Owners and Managers set budgets." in error_of(body)["message"]
    status, body = patch(api, f"/environments/{environment.pk}", {"idle_notice_hours": 0})
    assert status == 200 and body["data"]["idle_notice_hours"] == 0
    status, body = patch(api, f"/environments/{environment.pk}", {"idle_notice_hours": 1.5})
    assert status == 200 and body["data"]["idle_notice_hours"] == 1.5
    status, body = patch(api, f"/environments/{environment.pk}", {"idle_notice_hours": "0.25"})
    assert status == 200 and body["data"]["idle_notice_hours"] == 0.25
    for bad in (-1, 169, "half", 0.001, True):
        status, body = patch(api, f"/environments/{environment.pk}", {"idle_notice_hours": bad})
        assert status == 400 and "idle_notice_hours" in error_of(body)["details"], (bad, body)
    assert patch(api, f"/environments/{environment.pk}", {})[0] == 400


def test_environments_are_created_with_the_dashboards_rules(api, dev_api):
    status, body = api.post("/environments", {"name": "staging", "monthly_budget": "50"})
    assert status == 201 and body["data"]["name"] == "staging" and body["data"]["monthly_budget"] == "50.00"
    status, body = api.post("/environments", {"name": "staging"})
    assert status == 400 and error_of(body)["details"]["name"] == ["An environment with this name exists."]
    status, body = api.post("/environments", {"name": "has spaces"})
    assert status == 400 and "name" in error_of(body)["details"]
    assert dev_api.post("/environments", {"name": "mine"})[0] == 403


def test_another_workspaces_members_invitations_and_keys_are_404(outsider_api, api, workspace, developer):
    member = Membership.objects.get(workspace=workspace, user=developer)
    key = create_api_key(workspace=workspace, created_by=developer, name="k")[0]
    _, body = api.post("/invitations", {"email": "x@example.com"})
    assert outsider_api.delete(f"/members/{member.pk}")[0] == 404
    assert outsider_api.delete(f"/invitations/{body['data']['id']}")[0] == 404
    assert outsider_api.delete(f"/api-keys/{key.pk}")[0] == 404
    assert developer.username not in str(outsider_api.get("/members")[1])
