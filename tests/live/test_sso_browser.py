"""Single sign-on in Debian's Chromium: the product in its own processes (uvicorn and a Celery
worker, tests.live.test_browser.Stack) and a real OpenID Connect provider on loopback (a small
Django project with django-oauth-toolkit, tests/live/oidc_provider) in another. The browser
goes back and forth between them as a person's would, under the product's
Content-Security-Policy (its form-action must let the sign-in buttons reach the provider)."""

from __future__ import annotations

import pytest
from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.contrib.auth import get_user_model

from accounts import services
from accounts.invitations import invitation_url
from accounts.models import Invitation, Membership, Role, SingleSignOn
from audit.models import AuditEvent
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory
from tests.live.identity_provider import IdentityProvider, Person
from tests.live.test_accounts_browser import chromium, shot, sign_in
from tests.live.test_browser import CHROMIUM, PHONE, serving_stack, watch_policy

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]

BOB = Person("bob", "bob@acme.example")
DAVE = Person("dave.acme", "dave@example.com")  # the Developer's own address (UserFactory's)


@pytest.fixture
def stack(transactional_db, tmp_path):
    # The product's processes and this test share the keys: an invitation link signed here
    # opens there, and a client secret sealed here is unsealed there.
    with serving_stack(tmp_path, {"SECRET_KEY": settings.SECRET_KEY, "NODE_SECRETS_KEY": settings.NODE_SECRETS_KEY}) as stack:
        yield stack


@pytest.fixture
def acme(transactional_db):
    workspace = WorkspaceFactory(name="Acme")
    owner = MembershipFactory(workspace=workspace, role=Role.OWNER, user=UserFactory(username="olivia"))
    MembershipFactory(workspace=workspace, role=Role.DEVELOPER, user=UserFactory(username="dave"))
    return owner


@pytest.fixture
def provider(acme, stack, tmp_path):
    idp_dir = tmp_path / "idp"
    idp_dir.mkdir()
    idp = IdentityProvider(idp_dir, [BOB, DAVE],
                           redirect_uri=f"{stack.url}/sso/workspace-{acme.workspace_id}/login/callback/")
    yield idp
    idp.stop()


def open_page(browser, stack, violations: list[str], **options):
    context = browser.new_context(base_url=stack.url, **options)
    watch_policy(context, violations)
    page = context.new_page()
    page.set_default_timeout(30_000)
    return page


def sign_in_at_provider(page, person: Person) -> None:
    page.wait_for_selector("#idp-sign-in")
    page.fill("#idp-username", person.username)
    page.fill("#idp-password", person.password)
    page.click("#idp-sign-in")


def test_an_owner_connects_and_requires_single_sign_on_and_an_invited_teammate_joins_through_it(acme, stack, provider):
    violations: list[str] = []
    with chromium() as browser:
        page = open_page(browser, stack, violations)
        sign_in(page, "olivia", "pw")
        page.wait_for_url("**/clusters/")
        page.goto("/account/sso/")
        page.fill("#id_issuer", provider.issuer)
        page.fill("#id_client_id", provider.client_id)
        page.fill("#id_secret", provider.secret)
        page.check("#id_required")
        page.click("#sso-settings button:has-text('Connect')")
        page.locator("text=Single sign-on is connected").wait_for()
        assert page.get_attribute("#sso-status", "data-required") == "yes"
        assert page.locator("#sso-must").count() == 0  # Owners keep their password
        shot(page, "sso-owner-desktop.png")
        page.goto("/clusters/")
        assert page.url.endswith("/clusters/")
    assert violations == []

    sso = SingleSignOn.objects.get(workspace_id=acme.workspace_id)
    assert sso.required and sso.secret == provider.secret and provider.secret not in str(sso.sealed_secret)
    invitation = services.invite_member(by=acme, email=BOB.email, role=Role.MANAGER)
    link = invitation_url(invitation).replace(settings.SITE_URL, stack.url)

    with chromium() as browser:
        page = open_page(browser, stack, violations, **PHONE)
        page.goto(link)
        page.click("#sso-join")
        sign_in_at_provider(page, BOB)
        page.wait_for_url("**/clusters/")
        assert "Acme · Manager" in page.locator("#workspace-switch").inner_text()
        shot(page, "sso-joined-phone.png")
    assert violations == []

    bob_user = get_user_model().objects.get(email=BOB.email)
    assert Membership.objects.get(workspace_id=acme.workspace_id, user=bob_user).role == Role.MANAGER
    assert Invitation.objects.get(pk=invitation.pk).status == Invitation.Status.ACCEPTED
    assert AuditEvent.objects.filter(workspace_id=acme.workspace_id, action="invitation.accept",
                                     actor=bob_user.get_username()).count() == 1


def test_a_developer_with_a_password_is_sent_to_the_provider_links_and_then_signs_in_by_address(acme, stack, provider):
    services.configure_single_sign_on(by=acme, issuer=provider.issuer, client_id=provider.client_id,
                                      secret=provider.secret, required=True)
    violations: list[str] = []
    with chromium() as browser:
        page = open_page(browser, stack, violations)
        sign_in(page, "dave", "pw")
        page.wait_for_url("**/account/sso/")
        page.locator("#sso-must").wait_for()
        page.goto("/clusters/")
        assert page.url.endswith("/account/sso/")  # no page of the workspace without the provider
        page.click("#sso-go")
        sign_in_at_provider(page, DAVE)
        page.wait_for_url("**/clusters/")
        assert page.locator("#sso-must").count() == 0

        # Signed out, the address finds the provider, which still knows them: straight back in.
        page.click("button:has-text('Sign out')")
        page.wait_for_url("**/login/")
        page.click("#sso-sign-in")
        page.fill("#id_email", DAVE.email)
        page.click("button:has-text('Continue')")
        page.click("button:has-text(\"Continue to Acme's identity provider\")")
        page.wait_for_url("**/clusters/")
        assert "Acme · Developer" in page.locator("#workspace-switch").inner_text()
    assert violations == []

    link = SocialAccount.objects.get(provider=f"workspace-{acme.workspace_id}")
    assert link.user.username == "dave" and link.extra_data["userinfo"]["email"] == DAVE.email
