"""Single sign-on through a workspace's OpenID Connect provider, against a real provider: the
small Django project with django-oauth-toolkit in tests/live/oidc_provider, started on loopback
in its own process. The product's side is driven through its pages with Django's test client;
the person's side at the provider (its sign-in form, the authorization redirect) with httpx."""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlsplit

import httpx
import pytest
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from accounts import services
from accounts.models import Invitation, Membership, Role, SingleSignOn
from audit.models import AuditEvent
from tests.accounts.test_self_serve import fast_password_hashing, fresh_rate_limits  # noqa: F401 (autouse fixtures)
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory
from tests.live.identity_provider import IdentityProvider, Person

pytestmark = pytest.mark.django_db

BOB = Person("bob", "bob@acme.example")
DAVE = Person("dave-at-acme", "dave@example.com")  # the Developer's own address (UserFactory's)
MALLORY = Person("mallory", "carol@example.com")  # someone else's address
UNINVITED = Person("uninvited", "stranger@acme.example")
UNVERIFIED = Person("unverified", "unverified@acme.example", verified=False)


@pytest.fixture
def acme(db):
    return WorkspaceFactory(name="Acme")


@pytest.fixture
def acme_owner(acme):
    return MembershipFactory(workspace=acme, role=Role.OWNER, user=UserFactory(username="olivia"))


@pytest.fixture
def acme_developer(acme):
    return MembershipFactory(workspace=acme, role=Role.DEVELOPER, user=UserFactory(username="dave"))


@pytest.fixture(scope="module")
def identity_provider(tmp_path_factory):
    idp = IdentityProvider(tmp_path_factory.mktemp("idp"), [BOB, DAVE, MALLORY, UNINVITED, UNVERIFIED])
    yield idp
    idp.stop()


@pytest.fixture
def provider(acme, identity_provider):
    identity_provider.allow_redirect(f"http://testserver/sso/workspace-{acme.pk}/login/callback/")
    return identity_provider


@pytest.fixture
def connected(acme_owner, provider):
    return services.configure_single_sign_on(by=acme_owner, issuer=provider.issuer, client_id=provider.client_id,
                                             secret=provider.secret)


def password_client(username: str) -> Client:
    """Signed in through the sign-in form, as a person does (allauth records how)."""
    client = Client()
    response = client.post("/login/", {"login": username, "password": "pw"})
    assert response.status_code == 302, response.text
    return client


def through_provider(client: Client, provider: IdentityProvider, person: Person, start: str, **form: str):
    """Post `form` to the product's `start` (it sends the browser to the provider), sign in at the
    provider as `person`, and bring the provider's answer back to the product's callback."""
    response = client.post(start, form)
    assert response.status_code == 302, response.text
    authorize = response["Location"]
    assert authorize.startswith(f"{provider.issuer}/authorize/"), authorize
    with httpx.Client(base_url=provider.url, timeout=20) as browser:
        to_login = browser.get(authorize)
        assert to_login.status_code == 302, to_login.text
        login_page = to_login.headers["location"]
        browser.get(login_page)
        signed_in = browser.post(login_page, data={
            "username": person.username, "password": person.password,
            "csrfmiddlewaretoken": browser.cookies["idp_csrftoken"],
        })
        assert signed_in.status_code == 302, signed_in.text
        answer = browser.get(signed_in.headers["location"])
        assert answer.status_code == 302, answer.text
        callback = urlsplit(answer.headers["location"])
    assert callback.path.endswith("/login/callback/") and "code=" in callback.query
    return client.get(f"{callback.path}?{callback.query}")


def start_url(workspace_id: int) -> str:
    return f"/sso/workspace-{workspace_id}/login/"


def signed_in_user_id(client: Client) -> int | None:
    value = client.session.get("_auth_user_id")
    return int(value) if value else None


class TestConnecting:
    def test_an_owner_connects_a_provider_and_its_secret_is_sealed(self, acme, acme_owner, provider):
        client = password_client("olivia")
        response = client.post("/account/sso/", {
            "issuer": provider.issuer + "/", "client_id": provider.client_id, "secret": provider.secret, "required": "on",
        })
        assert response.status_code == 302, response.text
        sso = SingleSignOn.objects.get(workspace=acme)
        assert (sso.issuer, sso.client_id, sso.required) == (provider.issuer, provider.client_id, True)
        assert sso.secret == provider.secret
        assert provider.secret not in str(sso.sealed_secret)
        entry = AuditEvent.objects.get(workspace=acme, action="single_sign_on.set")
        assert provider.secret not in str(entry.changes) and entry.changes["required"] == [None, True]

    def test_an_issuer_that_is_not_the_providers_is_a_field_error(self, acme, acme_owner, provider):
        client = password_client("olivia")
        response = client.post("/account/sso/", {"issuer": provider.url, "client_id": "x", "secret": "y"})
        assert response.status_code == 400
        assert "answered 404" in response.text
        response = client.post("/account/sso/", {"issuer": "not a url", "client_id": "", "secret": "y"})
        assert response.status_code == 400 and "Enter a valid URL" in response.text
        assert not SingleSignOn.objects.filter(workspace=acme).exists()

    def test_only_an_owner_changes_it(self, acme, acme_developer, provider):
        MembershipFactory(workspace=acme, role=Role.MANAGER, user=UserFactory(username="manny"))
        for username in ("dave", "manny"):
            response = password_client(username).post("/account/sso/", {
                "issuer": provider.issuer, "client_id": provider.client_id, "secret": provider.secret,
            })
            assert response.status_code == 404
        assert not SingleSignOn.objects.exists()

    def test_an_outsiders_page_shows_their_own_workspace_only(self, connected, provider):
        MembershipFactory(role=Role.OWNER, user=UserFactory(username="mallory"))
        response = password_client("mallory").get("/account/sso/")
        assert response.status_code == 200 and provider.issuer not in response.text


class TestFirstSignIn:
    def test_an_invited_address_gets_an_account_and_joins_with_its_role(self, acme, acme_owner, connected, provider):
        services.invite_member(by=acme_owner, email=BOB.email, role=Role.MANAGER)
        client = Client()
        response = through_provider(client, provider, BOB, start_url(acme.pk), process="login")
        assert response.status_code == 302 and response["Location"] == "/clusters/", response.text
        bob = get_user_model().objects.get(email=BOB.email)
        assert signed_in_user_id(client) == bob.pk
        assert Membership.objects.get(workspace=acme, user=bob).role == Role.MANAGER
        assert Invitation.objects.get(email=BOB.email).status == Invitation.Status.ACCEPTED
        assert SocialAccount.objects.filter(user=bob, provider=f"workspace-{acme.pk}").exists()
        assert not bob.has_usable_password()
        assert AuditEvent.objects.get(workspace=acme, action="invitation.accept").actor == bob.username
        assert client.get("/clusters/").status_code == 200

    def test_an_address_with_no_invitation_gets_no_account(self, acme, connected, provider):
        client = Client()
        response = through_provider(client, provider, UNINVITED, start_url(acme.pk), process="login")
        assert response.status_code == 403 and "no open invitation" in response.text
        assert not get_user_model().objects.filter(email=UNINVITED.email).exists()
        assert signed_in_user_id(client) is None

    def test_an_expired_invitation_is_no_invitation(self, acme, acme_owner, connected, provider):
        invitation = services.invite_member(by=acme_owner, email=BOB.email, role=Role.DEVELOPER)
        Invitation.objects.filter(pk=invitation.pk).update(expires_at=timezone.now() - dt.timedelta(minutes=1))
        response = through_provider(Client(), provider, BOB, start_url(acme.pk), process="login")
        assert response.status_code == 403
        assert not get_user_model().objects.filter(email=BOB.email).exists()

    def test_an_address_the_provider_does_not_vouch_for_gets_no_account(self, acme, acme_owner, connected, provider):
        services.invite_member(by=acme_owner, email=UNVERIFIED.email, role=Role.DEVELOPER)
        response = through_provider(Client(), provider, UNVERIFIED, start_url(acme.pk), process="login")
        assert response.status_code == 403 and "did not vouch" in response.text
        assert not get_user_model().objects.filter(email=UNVERIFIED.email).exists()

    def test_a_provider_never_signs_in_an_existing_account_by_its_address(self, acme, acme_owner, connected, provider):
        carol = MembershipFactory(role=Role.OWNER, user=UserFactory(username="carol")).user  # elsewhere
        services.invite_member(by=acme_owner, email=MALLORY.email, role=Role.DEVELOPER)
        client = Client()
        response = through_provider(client, provider, MALLORY, start_url(acme.pk), process="login")
        assert response.status_code == 403 and "exists already" in response.text
        assert signed_in_user_id(client) is None
        assert not SocialAccount.objects.filter(user=carol).exists()
        assert not Membership.objects.filter(workspace=acme, user=carol).exists()


class TestRequired:
    def test_a_developer_signed_in_with_a_password_is_sent_to_the_provider_and_an_owner_is_not(
        self, acme, acme_owner, acme_developer, connected, provider,
    ):
        SingleSignOn.objects.filter(pk=connected.pk).update(required=True)
        developer = password_client("dave")
        response = developer.get("/clusters/")
        assert response.status_code == 302 and response["Location"] == "/account/sso/"
        page = developer.get("/account/sso/")
        assert page.status_code == 200 and "requires single sign-on" in page.text
        assert developer.get("/api/v1/clusters").status_code == 401  # the API takes keys, never the session
        assert developer.get("/clusters/", headers={"HX-Request": "true"})["HX-Redirect"] == "/account/sso/"
        assert password_client("olivia").get("/clusters/").status_code == 200

    def test_a_member_links_their_account_and_then_acts_in_the_workspace(
        self, acme, acme_developer, connected, provider,
    ):
        SingleSignOn.objects.filter(pk=connected.pk).update(required=True)
        developer = password_client("dave")
        response = through_provider(developer, provider, DAVE, start_url(acme.pk), process="connect", next="/clusters/")
        assert response.status_code == 302 and response["Location"] == "/clusters/", response.text
        assert SocialAccount.objects.get(provider=f"workspace-{acme.pk}").user == acme_developer.user
        assert developer.get("/clusters/").status_code == 200
        # Next time the provider alone signs them in.
        fresh = Client()
        response = through_provider(fresh, provider, DAVE, start_url(acme.pk), process="login")
        assert response.status_code == 302 and signed_in_user_id(fresh) == acme_developer.user_id
        assert fresh.get("/clusters/").status_code == 200
        assert AuditEvent.objects.filter(workspace=acme, action="account.sign_in", actor="dave").count() == 2

    def test_linking_refuses_an_identity_with_someone_elses_address(self, acme, acme_developer, connected, provider):
        developer = password_client("dave")
        response = through_provider(developer, provider, BOB, start_url(acme.pk), process="connect")
        assert response.status_code == 403 and "not a verified address of your account" in response.text
        assert not SocialAccount.objects.exists()

    def test_changing_the_issuer_unlinks_everyone(self, acme, acme_owner, acme_developer, connected, provider):
        developer = password_client("dave")
        through_provider(developer, provider, DAVE, start_url(acme.pk), process="connect")
        assert SocialAccount.objects.count() == 1
        services.configure_single_sign_on(by=acme_owner, issuer=provider.issuer, client_id="renamed", secret="")
        assert SocialAccount.objects.count() == 1  # same issuer: the links stand
        SingleSignOn.objects.filter(pk=connected.pk).update(issuer="https://old.example")
        services.configure_single_sign_on(by=acme_owner, issuer=provider.issuer, client_id=provider.client_id, secret="")
        assert SocialAccount.objects.count() == 0
        services.disconnect_single_sign_on(by=acme_owner)
        assert not SingleSignOn.objects.exists()
        assert AuditEvent.objects.filter(workspace=acme, action="single_sign_on.remove").count() == 1


class TestProviderFailures:
    def test_a_provider_that_does_not_answer_is_said_in_words(self, acme, connected, provider):
        from tests.live.processes import free_port

        SingleSignOn.objects.filter(pk=connected.pk).update(issuer=f"http://127.0.0.1:{free_port()}/o")
        response = Client().post(start_url(acme.pk), {"process": "login"})
        assert response.status_code == 502 and "did not answer" in response.text

    def test_a_wrong_client_secret_signs_nobody_in(self, acme, acme_owner, provider):
        services.configure_single_sign_on(by=acme_owner, issuer=provider.issuer, client_id=provider.client_id,
                                          secret="not-the-secret")
        services.invite_member(by=acme_owner, email=BOB.email, role=Role.DEVELOPER)
        client = Client()
        response = through_provider(client, provider, BOB, start_url(acme.pk), process="login")
        assert response.status_code < 500 and "Third-Party Login Failure" in response.text
        assert signed_in_user_id(client) is None
        assert not get_user_model().objects.filter(email=BOB.email).exists()

    def test_an_unknown_workspace_provider_is_not_found(self, acme):
        assert Client().post(start_url(acme.pk), {"process": "login"}).status_code == 404
        assert Client().post("/sso/workspace-x/login/", {"process": "login"}).status_code == 404


class TestSignInByAddress:
    def test_a_members_address_is_offered_their_workspaces_provider(self, acme, acme_developer, connected, provider):
        client = Client()
        response = client.post("/login/sso/", {"email": DAVE.email})
        assert response.status_code == 200
        assert f'action="{start_url(acme.pk)}"' in response.text
        # The button posts to allauth, which redirects to the provider: the page allows that.
        form_action = next(d for d in response["Content-Security-Policy"].split(";") if "form-action" in d)
        assert provider.url in form_action
        response = client.post(start_url(acme.pk), {"process": "login"})
        assert response.status_code == 302 and response["Location"].startswith(f"{provider.issuer}/authorize/")

    def test_an_unknown_address_is_a_field_error(self, connected):
        response = Client().post("/login/sso/", {"email": "nobody@nowhere.example"})
        assert response.status_code == 400 and "No workspace with single sign-on" in response.text
        assert Client().post("/login/sso/", {"email": "not an address"}).status_code == 400
