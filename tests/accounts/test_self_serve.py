"""Sign-up, invitations, workspaces and the getting-started checklist, through the pages."""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal

import pytest
from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import services
from accounts.invitations import invitation_from_token, invitation_token
from accounts.models import Environment, Invitation, Membership, Role, Workspace
from notifications.models import Notification
from tests.factories import MembershipFactory, UserFactory
from tests.web.conftest import client_for, developer_client, outsider_client  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

STRONG = "violet-kettle-harbour-42"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def fresh_rate_limits():
    from django.core.cache import cache

    cache.clear()


def sign_up(client: Client, email: str, password: str = STRONG, password2: str | None = None):
    return client.post(reverse("account_signup"), {"email": email, "password1": password, "password2": password2 or password})


class TestSignUp:
    def test_it_sends_a_verification_email_and_signs_in_only_after_it(self, client, mailoutbox):
        response = sign_up(client, "new@example.org")
        assert response.status_code == 302 and response["Location"] == reverse("account_email_verification_sent")
        assert "_auth_user_id" not in client.session
        [message] = mailoutbox
        assert message.subject == "Confirm your email address for Runcrate Clusters"
        assert "/confirm-email/" in message.body and message.alternatives  # text and HTML

    def test_a_taken_email_is_an_error_on_the_field(self, client, owner):
        response = sign_up(client, owner.email.upper())
        assert response.status_code == 200
        assert 'id="field-email"' in response.text and "already registered" in response.text
        assert get_user_model().objects.filter(email__iexact=owner.email).count() == 1

    @pytest.mark.parametrize("password, error", [("short", "too short"), ("password123", "too common"), ("4815162342", "entirely numeric")])
    def test_a_weak_password_is_an_error_on_the_field(self, client, password, error):
        response = sign_up(client, "new@example.org", password)
        assert response.status_code == 200 and error in response.text
        assert 'class="field-error"' in response.text
        assert not get_user_model().objects.filter(email="new@example.org").exists()

    def test_the_check_your_email_page_says_where_development_mail_lands(self, client, settings):
        settings.DEBUG = True
        settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
        text = client.get(reverse("account_email_verification_sent")).text
        assert 'id="dev-mail-note"' in text and str(settings.EMAIL_FILE_PATH) in text
        settings.DEBUG = False
        assert 'id="dev-mail-note"' not in client.get(reverse("account_email_verification_sent")).text

    def test_the_demo_keeps_signing_in_with_a_username(self, client):
        user = UserFactory(username="demo", email="demo@runcrate.example")
        response = client.post(reverse("login"), {"login": "demo", "password": "pw"})
        assert response.status_code == 302 and response["Location"] == reverse("clusters:list")
        assert client.session["_auth_user_id"] == str(user.pk)

    def test_repeated_wrong_passwords_slow_down_the_client_that_sends_them(self, client, owner):
        for _ in range(5):
            client.post(reverse("login"), {"login": "alice", "password": "wrong"})
        response = client.post(reverse("login"), {"login": "alice", "password": "pw"})
        assert "_auth_user_id" not in client.session
        assert "Too many failed sign-ins for this account from here" in response.text


class TestFirstMinutes:
    def test_a_person_without_a_workspace_names_one_and_owns_it(self):
        user = UserFactory(username="newbie")
        client = client_for(user)
        assert client.get(reverse("clusters:list"))["Location"] == reverse("accounts:welcome")
        response = client.post(reverse("accounts:welcome"), {"create-name": "  Newbie Lab "})
        assert response["Location"] == reverse("clusters:list")
        membership = Membership.objects.get(user=user)
        assert (membership.workspace.name, membership.role) == ("Newbie Lab", Role.OWNER)
        assert membership.workspace.credit_balance == 0
        [environment] = Environment.objects.filter(workspace=membership.workspace)
        assert environment.is_default and environment.monthly_budget == services.DEFAULT_MONTHLY_BUDGET

    def test_a_blank_name_is_an_error_on_the_field(self):
        client = client_for(UserFactory(username="newbie"))
        response = client.post(reverse("accounts:welcome"), {"create-name": "   "})
        assert response.status_code == 200 and 'class="field-error"' in response.text
        assert not Workspace.objects.filter(memberships__user__username="newbie").exists()

    def test_the_checklist_ticks_itself_off_and_disappears(self, machine_type):
        from billing import ledger
        from billing.models import LedgerEntry
        from clusters.services.create import create_cluster
        from tests.web.test_accounts import public_key

        user = UserFactory(username="newbie")
        workspace = services.create_workspace(name="Newbie Lab", owner=user)
        client = client_for(user)

        def done() -> int:
            text = client.get(reverse("clusters:list")).text
            return text.count('data-done="true"') if 'id="getting-started"' in text else -1

        assert done() == 0
        ledger.post_entry(workspace_id=workspace.pk, kind=LedgerEntry.Kind.DEPOSIT, amount=Decimal("50.00"),
                           idempotency_key="test-top-up", description="Top-up")
        assert done() == 1
        services.add_ssh_key(workspace=workspace, name="laptop", public_key=public_key(), created_by=user)
        assert done() == 2
        create_cluster(environment=workspace.default_environment, name="one", machine_type=machine_type,
                                machine_count=2, created_by=user)
        assert done() == -1  # all three done: the checklist is gone


class TestInvitations:
    def invite(self, owner, email="bob@example.org", role=Role.DEVELOPER) -> Invitation:
        return services.invite_member(by=Membership.objects.get(user=owner), email=email, role=role)

    def test_the_invitation_is_emailed_once_with_its_link(self, owner, workspace):
        invitation = self.invite(owner)
        notification = Notification.objects.get(dedupe_key=f"invitation:{invitation.pk}")
        assert list(notification.deliveries.values_list("email", flat=True)) == ["bob@example.org"]
        from notifications.rendering import render

        subject, text, html = render(notification.kind, notification.context)
        assert subject == f"alice@example.com invited you to {workspace.name} on Runcrate Clusters"
        # The link's token is signed with the time it was made: read it back, do not make another.
        prefix = reverse("accounts:invitation", args=["TOKEN"]).removesuffix("TOKEN/")
        found = re.search(re.escape(prefix) + r"([^/\s]+)/", text)
        assert found and invitation_from_token(found.group(1)) == invitation, text
        assert "Developer" in html

    def test_someone_invited_signs_up_without_a_second_verification_and_joins(self, owner, workspace, mailoutbox):
        invitation = self.invite(owner)
        client = Client()
        url = reverse("accounts:invitation", args=[invitation_token(invitation)])
        assert "Create an account" in client.get(url).text
        response = sign_up(client, "bob@example.org")
        assert response["Location"] == url and mailoutbox == []
        response = client.post(url)
        assert response["Location"] == reverse("clusters:list")
        assert Membership.objects.get(workspace=workspace, user__email="bob@example.org").role == Role.DEVELOPER

    def test_an_existing_user_signs_in_and_accepts_with_the_role(self, owner, workspace, outsider):
        invitation = self.invite(owner, email=outsider.email, role=Role.MANAGER)
        client = Client()
        url = reverse("accounts:invitation", args=[invitation_token(invitation)])
        client.get(url)
        response = client.post(reverse("login"), {"login": "mallory", "password": "pw"})
        assert response["Location"] == url
        client.post(url)
        assert Membership.objects.get(workspace=workspace, user=outsider).role == Role.MANAGER

    def test_the_link_cannot_be_used_twice(self, owner, workspace):
        bob = UserFactory(username="bob", email="bob@example.org")
        invitation = self.invite(owner)
        url = reverse("accounts:invitation", args=[invitation_token(invitation)])
        client = client_for(bob)
        client.post(url)
        Membership.objects.filter(user=bob).delete()  # removed since; the old link must not bring him back
        response = client.post(url)
        assert response.status_code == 410 and "already used" in response.text
        assert not Membership.objects.filter(user=bob).exists()

    def test_someone_elses_session_cannot_use_it(self, owner, workspace, outsider):
        invitation = self.invite(owner)  # to bob@example.org
        url = reverse("accounts:invitation", args=[invitation_token(invitation)])
        response = client_for(outsider).post(url)
        assert response.status_code == 403 and "sent to <strong>bob@example.org</strong>" in response.text
        assert not Membership.objects.filter(workspace=workspace, user=outsider).exists()
        assert Invitation.objects.get().status == Invitation.Status.PENDING

    def test_an_unverified_address_is_not_enough(self, owner, workspace):
        bob = UserFactory(username="bob", email="bob@example.org", verified_email=False)
        EmailAddress.objects.create(user=bob, email="bob@example.org", verified=False, primary=True)
        invitation = self.invite(owner)
        response = client_for(bob).post(reverse("accounts:invitation", args=[invitation_token(invitation)]))
        assert response.status_code == 403 and not Membership.objects.filter(user=bob).exists()

    def test_a_revoked_or_expired_invitation_is_dead(self, owner, workspace):
        bob = UserFactory(username="bob", email="bob@example.org")
        revoked = self.invite(owner)
        response = client_for(owner).post(reverse("accounts:invitation_revoke", args=[revoked.pk]))
        assert response.status_code == 302
        assert client_for(bob).post(reverse("accounts:invitation", args=[invitation_token(revoked)])).status_code == 410
        expired = self.invite(owner)
        Invitation.objects.filter(pk=expired.pk).update(expires_at=timezone.now() - dt.timedelta(seconds=1))
        response = client_for(bob).post(reverse("accounts:invitation", args=[invitation_token(expired)]))
        assert response.status_code == 410 and "expired" in response.text
        assert not Membership.objects.filter(user=bob).exists()

    def test_a_forged_token_is_404(self, client):
        assert client.get(reverse("accounts:invitation", args=["1:forged"])).status_code == 404

    def test_a_developer_cannot_revoke_and_an_outsider_cannot_see_it(self, owner, developer_client, outsider_client):
        invitation = self.invite(owner)
        assert developer_client.post(reverse("accounts:invitation_revoke", args=[invitation.pk])).status_code == 404
        assert outsider_client.post(reverse("accounts:invitation_revoke", args=[invitation.pk])).status_code == 404
        assert Invitation.objects.get().status == Invitation.Status.PENDING

    def test_a_second_invitation_to_a_pending_address_is_refused(self, owner):
        self.invite(owner)
        response = client_for(owner).post(reverse("accounts:members"), {"email": "BOB@example.org", "role": "developer"})
        assert "has a pending invitation" in response.text and Invitation.objects.count() == 1


class TestWorkspaces:
    URL = reverse("accounts:workspaces")

    def test_a_member_creates_another_workspace_and_is_switched_to_it(self, developer_client, developer):
        response = developer_client.post(self.URL, {"create-name": "Side Project"})
        assert response["Location"] == reverse("clusters:list")
        assert Membership.objects.get(user=developer, workspace__name="Side Project").role == Role.OWNER
        assert "Side Project · Owner" in developer_client.get(reverse("clusters:list")).text

    def test_only_the_owner_renames(self, owner, developer_client, workspace):
        assert developer_client.post(self.URL, {"rename-name": "Hijacked"}).status_code == 404
        client_for(owner).post(self.URL, {"rename-name": "Renamed Lab"})
        workspace.refresh_from_db()
        assert workspace.name == "Renamed Lab"

    def test_the_last_owner_cannot_leave_but_a_developer_can(self, owner, developer, workspace):
        client_for(owner).post(reverse("accounts:workspace_leave", args=[workspace.pk]))
        assert Membership.objects.filter(user=owner, workspace=workspace).exists()
        client = client_for(developer)
        client.post(reverse("accounts:workspace_leave", args=[workspace.pk]))
        assert not Membership.objects.filter(user=developer, workspace=workspace).exists()
        # With no workspace left, they are asked to name one rather than shown a 404.
        assert client.get(reverse("clusters:list"))["Location"] == reverse("accounts:welcome")

    def test_an_owner_leaves_once_another_owner_exists(self, owner, workspace):
        MembershipFactory(workspace=workspace, user=UserFactory(username="olga"), role=Role.OWNER)
        client_for(owner).post(reverse("accounts:workspace_leave", args=[workspace.pk]))
        assert not Membership.objects.filter(user=owner, workspace=workspace).exists()
