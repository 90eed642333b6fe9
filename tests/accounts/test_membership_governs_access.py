"""Membership is the single source of access: what someone holds through a workspace (a link
they opened, invitations they sent, API keys they made) ends when their place in it ends."""

from __future__ import annotations

import pytest
from allauth.account.models import EmailAddress
from django.test import Client
from django.urls import reverse

from accounts import services
from accounts.invitations import invitation_token
from accounts.models import Invitation, Membership, Role
from api.keys import create_api_key
from api.models import ApiKey
from clusters.models import Cluster, Status
from tests.api.conftest import ApiClient, error_of, make_cluster
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

STRONG = "violet-kettle-harbour-42"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    from django.core.cache import cache

    cache.clear()


def membership(user, workspace=None) -> Membership:
    memberships = Membership.objects.filter(user=user)
    return memberships.get(workspace=workspace) if workspace else memberships.get()


def sign_up(client: Client, email: str):
    return client.post(reverse("account_signup"), {"email": email, "password1": STRONG, "password2": STRONG})


class TestInvitationStash:
    def test_a_revoked_invitation_no_longer_verifies_the_address_of_a_browser_that_opened_it(self, owner, workspace):
        invitation = services.invite_member(by=membership(owner), email="bob@example.org", role=Role.DEVELOPER)
        browser = Client()
        browser.get(reverse("accounts:invitation", args=[invitation_token(invitation)]))  # stashes the address
        services.revoke_invitation(by=membership(owner), invitation=invitation)

        response = sign_up(browser, "bob@example.org")

        assert response["Location"] == reverse("account_email_verification_sent")
        assert not EmailAddress.objects.get(email="bob@example.org").verified
        assert "_auth_user_id" not in browser.session

    def test_an_open_invitation_still_verifies_it(self, owner, workspace):
        invitation = services.invite_member(by=membership(owner), email="bob@example.org", role=Role.DEVELOPER)
        browser = Client()
        browser.get(reverse("accounts:invitation", args=[invitation_token(invitation)]))
        sign_up(browser, "bob@example.org")
        assert EmailAddress.objects.get(email="bob@example.org").verified

    def test_the_stash_verifies_only_the_invited_address(self, owner, workspace):
        invitation = services.invite_member(by=membership(owner), email="bob@example.org", role=Role.DEVELOPER)
        browser = Client()
        browser.get(reverse("accounts:invitation", args=[invitation_token(invitation)]))
        sign_up(browser, "eve@example.org")
        assert not EmailAddress.objects.get(email="eve@example.org").verified


class TestRemovingAMember:
    @pytest.fixture
    def manager(self, workspace):
        return MembershipFactory(workspace=workspace, role=Role.MANAGER, user=UserFactory(username="max")).user

    def test_the_invitations_they_sent_close(self, owner, manager, workspace):
        sent = services.invite_member(by=membership(manager), email="bob@example.org", role=Role.MANAGER)
        services.remove_member(by=membership(owner), membership=membership(manager))

        assert Invitation.objects.get(pk=sent.pk).status == Invitation.Status.REVOKED
        bob = UserFactory(username="bob", email="bob@example.org")
        response = client_for(bob).post(reverse("accounts:invitation", args=[invitation_token(sent)]))
        assert response.status_code == 410
        assert not Membership.objects.filter(workspace=workspace, user=bob).exists()

    def test_an_invitation_from_someone_who_may_no_longer_invite_grants_nothing(self, owner, manager, workspace):
        sent = services.invite_member(by=membership(manager), email="bob@example.org", role=Role.MANAGER)
        services.change_role(by=membership(owner), membership=membership(manager), role=Role.DEVELOPER)
        bob = UserFactory(username="bob", email="bob@example.org")
        client_for(bob).post(reverse("accounts:invitation", args=[invitation_token(sent)]))
        assert not Membership.objects.filter(workspace=workspace, user=bob).exists()

    def test_their_keys_stop_and_stay_stopped_when_they_are_invited_back(self, owner, manager, workspace):
        _, raw = create_api_key(workspace=workspace, created_by=manager, name="laptop")
        assert ApiClient(raw).get("/clusters")[0] == 200
        services.remove_member(by=membership(owner), membership=membership(manager))
        assert ApiClient(raw).get("/clusters")[0] == 401

        again = services.invite_member(by=membership(owner), email=manager.email, role=Role.MANAGER)
        services.accept_invitation(user=manager, invitation=again)

        status, body = ApiClient(raw).get("/clusters")
        assert status == 401 and "revoked" in error_of(body)["message"]
        key = ApiKey.objects.get()
        response = client_for(manager).post(reverse("api:key_reactivate", args=[key.pk]))
        assert response.status_code == 302
        assert ApiClient(raw).get("/clusters")[0] == 401

    def test_leaving_revokes_their_keys_too(self, owner, manager, workspace):
        _, raw = create_api_key(workspace=workspace, created_by=manager, name="laptop")
        services.leave_workspace(membership=membership(manager))
        MembershipFactory(workspace=workspace, role=Role.MANAGER, user=manager)
        assert ApiClient(raw).get("/clusters")[0] == 401

    def test_keys_they_made_in_other_workspaces_keep_working_there(self, owner, manager, workspace):
        elsewhere = WorkspaceFactory(name="Elsewhere")
        MembershipFactory(workspace=elsewhere, role=Role.OWNER, user=manager)
        _, raw = create_api_key(workspace=elsewhere, created_by=manager, name="there")
        services.remove_member(by=membership(owner), membership=membership(manager, workspace))
        assert ApiClient(raw).get("/clusters")[0] == 200


class TestAKeyActsOnlyWhereItWasMade:
    def test_a_key_from_another_workspace_of_the_same_person_cannot_act_here(self, owner, workspace, environment,
                                                                              machine_type):
        here = make_cluster(environment, machine_type, name="here")
        elsewhere = WorkspaceFactory(name="Elsewhere")
        MembershipFactory(workspace=elsewhere, role=Role.OWNER, user=owner)
        _, raw = create_api_key(workspace=elsewhere, created_by=owner, name="there")
        api = ApiClient(raw)

        status, body = api.call("GET", "/clusters", headers={"X-Workspace": workspace.name})
        assert status == 403 and error_of(body)["code"] == "wrong_workspace"
        status, body = api.call("DELETE", f"/clusters/{here.pk}", headers={"X-Workspace": str(workspace.pk)})
        assert status == 403
        assert Cluster.objects.get(pk=here.pk).status not in (Status.TERMINATING, Status.TERMINATED)

    def test_naming_its_own_workspace_is_fine(self, owner, workspace):
        _, raw = create_api_key(workspace=workspace, created_by=owner, name="here")
        assert ApiClient(raw).call("GET", "/clusters", headers={"X-Workspace": workspace.name})[0] == 200
        assert ApiClient(raw).call("GET", "/clusters", headers={"X-Workspace": str(workspace.pk)})[0] == 200
