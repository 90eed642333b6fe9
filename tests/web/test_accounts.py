"""Members and roles, SSH keys, environments and budgets, the workspace and environment switchers."""

from __future__ import annotations

from decimal import Decimal

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.urls import reverse

from accounts.models import Environment, Invitation, Membership, Role, SSHKey, Workspace
from accounts.tenancy import ENVIRONMENT_SESSION_KEY, WORKSPACE_SESSION_KEY
from clusters.services.create import create_cluster
from tests.factories import MembershipFactory, UserFactory
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db


def public_key(comment: str = "me@laptop") -> str:
    raw = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return f"{raw.decode()} {comment}"


def outsider_workspace(outsider) -> Workspace:
    return Workspace.objects.get(memberships__user=outsider)


class TestMembers:
    URL = reverse("accounts:members")

    def test_everyone_in_the_workspace_sees_the_members(self, member_client, owner, developer):
        text = member_client.get(self.URL).text
        assert "alice" in text and "dave" in text

    def test_an_outsider_sees_only_their_own_workspace(self, outsider_client, owner):
        text = outsider_client.get(self.URL).text
        assert "mallory" in text and "alice" not in text

    def test_the_owner_invites_by_email_with_a_role(self, owner, workspace):
        response = client_for(owner).post(self.URL, {"email": "newbie@example.org", "role": "developer"})
        assert response.status_code == 302
        invitation = Invitation.objects.get(workspace=workspace)
        assert (invitation.email, invitation.role, invitation.status) == ("newbie@example.org", Role.DEVELOPER, "pending")
        assert "newbie@example.org" in client_for(owner).get(self.URL).text

    def test_a_manager_invites_but_not_an_owner(self, manager, workspace):
        response = client_for(manager).post(self.URL, {"email": "newbie@example.org", "role": "owner"})
        assert "Only the Owner can make another Owner." in response.text
        assert not Invitation.objects.exists()

    def test_a_bad_address_is_an_error_on_the_form(self, owner):
        response = client_for(owner).post(self.URL, {"email": "not-an-address", "role": "developer"})
        assert response.status_code == 200 and 'class="field-error"' in response.text
        assert not Invitation.objects.exists()

    def test_a_member_cannot_be_invited_again(self, owner, developer):
        response = client_for(owner).post(self.URL, {"email": developer.email.upper(), "role": "developer"})
        assert "is already a member" in response.text
        assert not Invitation.objects.exists()

    def test_a_developer_cannot_invite(self, developer_client, workspace):
        assert "Invite a teammate" not in developer_client.get(self.URL).text
        response = developer_client.post(self.URL, {"email": "newbie@example.org", "role": "developer"})
        assert response.status_code == 404
        assert not Invitation.objects.exists()

    def test_only_the_owner_changes_roles(self, owner, manager, developer, workspace):
        dave = Membership.objects.get(user=developer)
        url = reverse("accounts:member_role", args=[dave.pk])
        response = client_for(manager).post(url, {"role": "manager"}, follow=True)
        assert "Only the Owner changes roles." in response.text
        dave.refresh_from_db()
        assert dave.role == Role.DEVELOPER
        client_for(owner).post(url, {"role": "manager"})
        dave.refresh_from_db()
        assert dave.role == Role.MANAGER

    def test_the_last_owner_cannot_step_down(self, owner):
        me = Membership.objects.get(user=owner)
        response = client_for(owner).post(reverse("accounts:member_role", args=[me.pk]), {"role": "developer"}, follow=True)
        assert "A workspace keeps at least one Owner." in response.text
        me.refresh_from_db()
        assert me.role == Role.OWNER

    def test_another_workspaces_membership_is_404(self, owner, outsider):
        theirs = Membership.objects.get(user=outsider)
        client = client_for(owner)
        assert client.post(reverse("accounts:member_role", args=[theirs.pk]), {"role": "developer"}).status_code == 404
        assert client.post(reverse("accounts:member_remove", args=[theirs.pk])).status_code == 404
        assert Membership.objects.filter(pk=theirs.pk, role=Role.OWNER).exists()

    def test_a_manager_removes_a_developer_but_not_the_owner(self, owner, manager, developer):
        client = client_for(manager)
        owner_membership = Membership.objects.get(user=owner)
        response = client.post(reverse("accounts:member_remove", args=[owner_membership.pk]), follow=True)
        assert "You cannot remove this member." in response.text
        client.post(reverse("accounts:member_remove", args=[Membership.objects.get(user=developer).pk]))
        assert not Membership.objects.filter(user=developer).exists()
        assert Membership.objects.filter(user=owner).exists()

    def test_a_developer_cannot_remove_anyone(self, developer_client, owner):
        owner_membership = Membership.objects.get(user=owner)
        response = developer_client.post(reverse("accounts:member_remove", args=[owner_membership.pk]), follow=True)
        assert "You cannot remove this member." in response.text
        assert Membership.objects.filter(pk=owner_membership.pk).exists()

    def test_anonymous_is_sent_to_sign_in(self, client):
        assert client.get(self.URL).status_code == 302


class TestSSHKeys:
    URL = reverse("accounts:ssh_keys")

    def test_a_member_adds_a_key_and_sees_its_fingerprint(self, member_client, workspace):
        response = member_client.post(self.URL, {"name": "laptop", "public_key": public_key()}, follow=True)
        key = SSHKey.objects.get(workspace=workspace)
        assert key.fingerprint.startswith("SHA256:")
        assert key.fingerprint in response.text

    def test_a_bad_key_is_an_error_on_the_form(self, member_client):
        response = member_client.post(self.URL, {"name": "laptop", "public_key": "ssh-dss AAAA"})
        assert "Unsupported key type" in response.text
        assert not SSHKey.objects.exists()

    @pytest.mark.parametrize(
        "payload",
        [
            "{key} a@b;# END runcrate customer;{other} x",
            'command="curl 127.0.0.1|sh",no-pty {key}',
            "{key} a@b\n{other} second",
            "{key} a@b\r# END runcrate customer",
            "{key} $(reboot)",
            "{key} a\x00b",
            "ssh-rsa {blob_of_key}",
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA",
        ],
        ids=["semicolons", "options", "newline", "carriage return", "shell in comment", "nul", "type mismatch", "truncated"],
    )
    def test_a_key_that_is_not_one_plain_key_line_is_refused(self, member_client, payload):
        key, other = public_key("").strip(), public_key("").strip()
        text = payload.format(key=key, other=other, blob_of_key=key.split()[1])

        response = member_client.post(self.URL, {"name": "laptop", "public_key": text})

        assert response.status_code == 200 and "field-error" in response.text
        assert not SSHKey.objects.exists()

    def test_a_key_is_stored_in_canonical_form(self, member_client, workspace):
        key = public_key("").strip()
        member_client.post(self.URL, {"name": "laptop", "public_key": f"  {key}\t  me  at  laptop \n"})
        assert SSHKey.objects.get(workspace=workspace).public_key == f"{key} me at laptop"

    def test_the_same_key_twice_is_refused(self, member_client):
        key = public_key()
        member_client.post(self.URL, {"name": "one", "public_key": key})
        response = member_client.post(self.URL, {"name": "two", "public_key": key})
        assert "This key is already in the workspace." in response.text
        assert SSHKey.objects.count() == 1

    def test_keys_are_scoped_to_the_workspace(self, member_client, outsider):
        theirs = SSHKey.objects.create(workspace=outsider_workspace(outsider), name="theirs", public_key="k", fingerprint="f")
        assert "theirs" not in member_client.get(self.URL).text
        assert member_client.post(reverse("accounts:ssh_key_delete", args=[theirs.pk])).status_code == 404
        assert SSHKey.objects.filter(pk=theirs.pk).exists()

    def test_a_member_deletes_a_key(self, member_client, workspace):
        key = SSHKey.objects.create(workspace=workspace, name="old", public_key="k", fingerprint="f")
        member_client.post(reverse("accounts:ssh_key_delete", args=[key.pk]))
        assert not SSHKey.objects.exists()

    def test_anonymous_is_sent_to_sign_in(self, client):
        assert client.get(self.URL).status_code == 302


class TestEnvironments:
    URL = reverse("accounts:environments")

    def test_the_owner_creates_an_environment(self, owner, workspace):
        client_for(owner).post(self.URL, {"name": "staging", "monthly_budget": "250"})
        assert Environment.objects.get(workspace=workspace, name="staging").monthly_budget == Decimal("250")

    def test_a_developer_cannot_create_one(self, developer_client, workspace):
        assert "New environment" not in developer_client.get(self.URL).text
        response = developer_client.post(self.URL, {"name": "staging", "monthly_budget": "250"}, follow=True)
        assert "Only Owners and Managers create environments." in response.text
        assert not Environment.objects.filter(name="staging").exists()

    def test_a_manager_sets_a_budget(self, manager, environment):
        client_for(manager).post(reverse("accounts:environment_budget", args=[environment.pk]), {"monthly_budget": "42"})
        environment.refresh_from_db()
        assert environment.monthly_budget == Decimal("42")

    def test_a_developer_cannot_set_a_budget(self, developer_client, environment):
        before = environment.monthly_budget
        response = developer_client.post(
            reverse("accounts:environment_budget", args=[environment.pk]), {"monthly_budget": "1"}, follow=True
        )
        assert "Only Owners and Managers set budgets." in response.text
        environment.refresh_from_db()
        assert environment.monthly_budget == before

    def test_another_workspaces_environment_is_404(self, owner, outsider):
        theirs = outsider_workspace(outsider).default_environment
        response = client_for(owner).post(reverse("accounts:environment_budget", args=[theirs.pk]), {"monthly_budget": "1"})
        assert response.status_code == 404
        theirs.refresh_from_db()
        assert theirs.monthly_budget != Decimal("1")

    def test_an_outsider_sees_only_their_environments(self, outsider_client, workspace):
        workspace.environments.create(name="secret-project")
        assert "secret-project" not in outsider_client.get(self.URL).text


class TestSwitchers:
    def test_the_environment_switcher_scopes_the_list(self, owner, cluster, workspace):
        staging = workspace.environments.create(name="staging")
        client = client_for(owner)
        response = client.post(reverse("accounts:switch_environment"), {"environment": staging.pk, "next": "/clusters/"})
        assert response.status_code == 302 and response["Location"] == "/clusters/"
        assert client.session[ENVIRONMENT_SESSION_KEY] == staging.pk
        text = client.get(reverse("clusters:list")).text
        assert "No live clusters in staging" in text and "train" not in text

    def test_the_environment_switcher_ignores_a_foreign_next(self, owner, workspace):
        staging = workspace.environments.create(name="staging")
        response = client_for(owner).post(
            reverse("accounts:switch_environment"), {"environment": staging.pk, "next": "https://evil.example/"}
        )
        assert response["Location"] == reverse("clusters:list")

    def test_another_workspaces_environment_is_404(self, owner, outsider):
        theirs = outsider_workspace(outsider).default_environment
        client = client_for(owner)
        assert client.post(reverse("accounts:switch_environment"), {"environment": theirs.pk}).status_code == 404
        assert ENVIRONMENT_SESSION_KEY not in client.session

    def test_the_workspace_switcher_moves_to_another_membership(self, owner, cluster):
        second = MembershipFactory(user=owner, role=Role.DEVELOPER).workspace
        client = client_for(owner)
        text = client.get(reverse("clusters:list")).text
        assert f'<option value="{second.pk}"' in text  # both workspaces are offered
        client.post(reverse("accounts:switch_workspace"), {"workspace": second.pk})
        assert client.session[WORKSPACE_SESSION_KEY] == second.pk
        assert "train" not in client.get(reverse("clusters:list")).text
        # And the first workspace's cluster is now out of reach, as is its billing (Developer here).
        assert client.get(cluster.get_absolute_url()).status_code == 404
        assert client.get(reverse("billing:overview")).status_code == 403

    def test_another_workspace_is_404(self, owner, outsider):
        client = client_for(owner)
        response = client.post(reverse("accounts:switch_workspace"), {"workspace": outsider_workspace(outsider).pk})
        assert response.status_code == 404
        assert WORKSPACE_SESSION_KEY not in client.session

    def test_a_stale_session_falls_back_to_a_workspace_of_the_user(self, owner, outsider, workspace):
        client = client_for(owner)
        session = client.session
        session[WORKSPACE_SESSION_KEY] = outsider_workspace(outsider).pk
        session.save()
        text = client.get(reverse("accounts:members")).text
        assert workspace.name in text and "mallory" not in text


class TestBilling:
    URL = reverse("billing:overview")

    @pytest.mark.parametrize("role", ["owner", "manager"])
    def test_owners_and_managers_see_billing(self, request, role):
        client = client_for(request.getfixturevalue(role))
        assert client.get(self.URL).status_code == 200
        assert f'href="{self.URL}"' in client.get(reverse("clusters:list")).text

    def test_a_developer_is_told_their_role_does_not_allow_it_and_gets_no_link(self, developer_client):
        assert developer_client.get(self.URL).status_code == 403
        assert f'href="{self.URL}"' not in developer_client.get(reverse("clusters:list")).text

    def test_the_page_shows_only_the_workspaces_balance(self, owner, outsider):
        Workspace.objects.filter(memberships__user=outsider).update(credit_balance=Decimal("777.77"))
        assert "777.77" not in client_for(owner).get(self.URL).text

    def test_anonymous_is_sent_to_sign_in(self, client):
        assert client.get(self.URL).status_code == 302


@pytest.mark.parametrize("url", [reverse("clusters:list"), reverse("accounts:members"), reverse("billing:overview")])
def test_a_user_without_a_workspace_is_sent_to_name_one_not_a_404(db, url):
    client = client_for(UserFactory(username="loner"))
    response = client.get(url)
    assert response.status_code == 302 and response["Location"] == reverse("accounts:welcome")
    assert client.get(url, HTTP_HX_REQUEST="true")["HX-Redirect"] == reverse("accounts:welcome")


def test_a_cluster_created_by_one_member_is_managed_by_another(developer, owner, environment, machine_type):
    cluster = create_cluster(
        environment=environment, name="shared", machine_type=machine_type, machine_count=2, created_by=owner
    )
    response = client_for(developer).post(reverse("clusters:terminate", args=[cluster.pk]), {"confirm_name": "shared"})
    assert response.status_code == 302
    cluster.refresh_from_db()
    assert cluster.status == "terminating"


@pytest.mark.parametrize(("url", "field"), [("accounts:switch_workspace", "workspace"), ("accounts:switch_environment", "environment")])
@pytest.mark.parametrize("value", ["abc", "", "1.5"])
def test_a_switcher_given_garbage_answers_404(owner, url, field, value):
    assert client_for(owner).post(reverse(url), {field: value}).status_code == 404


def test_the_key_migration_keeps_plain_keys_canonical_and_deletes_injected_rows(workspace):
    from importlib import import_module

    from django.apps import apps

    migration = import_module("accounts.migrations.0002_canonical_ssh_keys")
    plain = public_key("").strip()
    injected = f"{public_key('').strip()} a@b;# END runcrate customer;{public_key('').strip()} x"
    kept = SSHKey.objects.create(workspace=workspace, name="kept", public_key=f"  {plain}   me ", fingerprint="old")
    SSHKey.objects.create(workspace=workspace, name="injected", public_key=injected, fingerprint="f2")

    migration.canonicalize_keys(apps, None)

    kept.refresh_from_db()
    assert [k.name for k in SSHKey.objects.all()] == ["kept"]
    assert kept.public_key == f"{plain} me" and kept.fingerprint.startswith("SHA256:")
