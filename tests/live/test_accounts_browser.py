"""In Debian's Chromium, against the product in its own processes (uvicorn and a Celery worker)
and a real SMTP server (aiosmtpd on 127.0.0.1): a stranger becomes a customer with no
operator — signs up, reads the verification email, names a workspace, funds it, adds a key,
creates a cluster and invites a teammate who signs up through the invitation; two-factor
set-up and the sign-in that asks for the code; password reset through the emailed link."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import struct
import time
from contextlib import contextmanager

import pytest
from allauth.mfa.models import Authenticator
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from accounts.models import Invitation, Membership, Role
from clusters.models import Cluster
from offers import lab
from offers.models import Host
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.test_browser import CHROMIUM, CHROMIUM_ARGS, SCREENSHOTS, Stack, watch_policy
from tests.notifications.conftest import SMTPServer, subject_of, text_of

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not __import__("pathlib").Path(CHROMIUM).exists(), reason=f"{CHROMIUM} is missing"),
]

PASSWORD = "violet-kettle-harbour-42"


@pytest.fixture
def mail():
    server = SMTPServer()
    server.start()
    yield server
    server.stop()


@pytest.fixture
def stack(transactional_db, tmp_path, mail):
    stack = Stack(tmp_path, env={
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend", "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(mail.port), "EMAIL_USE_TLS": "0",
    })
    try:
        stack.wait_until_serving()
        yield stack
    finally:
        stack.stop()


@contextmanager
def chromium():
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread, where Django refuses database
    # calls: the database is read before and after the browser, never during.
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def wait_for_mail(server: SMTPServer, address: str, subject_part: str, timeout: float = 30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for message in server.inbox.to(address):
            if subject_part in subject_of(message):
                return message
        time.sleep(0.2)
    raise AssertionError(f"no email to {address} about {subject_part!r}; got {server.inbox.subjects()}")


def link_in(message, path_part: str) -> str:
    links = re.findall(r"https?://\S+", text_of(message))
    matching = [link for link in links if path_part in link]
    assert matching, f"no {path_part} link in:\n{text_of(message)}"
    return matching[0]


def totp(secret: str, at: float | None = None) -> str:
    """RFC 6238 (SHA-1, 30 s, 6 digits), written here from the RFC rather than taken from the
    code under test."""
    key = base64.b32decode(secret.upper() + "=" * (-len(secret) % 8))
    counter = int((time.time() if at is None else at) // 30)
    digest = hmac.new(key, struct.pack(">Q", counter), hashlib.sha1).digest()
    offset = digest[-1] & 0x0F
    return f"{(struct.unpack('>I', digest[offset:offset + 4])[0] & 0x7FFFFFFF) % 1_000_000:06d}"


def fresh_code(secret: str, not_in_step: int | None = None) -> tuple[str, int]:
    """A code with time left in its 30-second step (a loaded machine is slow to submit), from
    a step other than `not_in_step` (a code is accepted once)."""
    while True:
        now = time.time()
        step = int(now // 30)
        if 30 - now % 30 > 10 and step != not_in_step:
            return totp(secret, now), step
        time.sleep(30 - now % 30 + 0.2)


def public_key() -> str:
    raw = Ed25519PrivateKey.generate().public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return raw.decode() + " ada@laptop"


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


@pytest.fixture
def offers(db):
    machine_type = machine_type_with_hosts(4)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=1, join_seconds=1, install_seconds=1)
    return machine_type


def test_a_stranger_signs_up_builds_a_cluster_and_a_teammate_joins_through_an_invitation(offers, stack, mail):
    key = public_key()
    with chromium() as browser:
        sign_up_build_and_invite(browser, stack, mail, key)

    bob_membership = Membership.objects.get(user__email="bob@example.org")
    assert (bob_membership.workspace.name, bob_membership.role) == ("Ada Lab", Role.DEVELOPER)
    assert Membership.objects.get(user__email="ada@example.org").role == Role.OWNER
    assert Invitation.objects.get().status == Invitation.Status.ACCEPTED
    assert Cluster.objects.get(name="first-run").environment.workspace == bob_membership.workspace


def sign_up_build_and_invite(browser, stack, mail, key: str) -> None:
    violations: list[str] = []
    try:
        ada = browser.new_context(base_url=stack.url)
        watch_policy(ada, violations)
        page = ada.new_page()
        page.set_default_timeout(30_000)

        # Sign up; the page says to check the inbox.
        page.goto("/signup/")
        page.fill("#id_email", "ada@example.org")
        page.fill("#id_password1", PASSWORD)
        page.fill("#id_password2", PASSWORD)
        page.click("button:has-text('Create account')")
        page.locator("h1", has_text="Check your email").wait_for()

        # The verification email from the real SMTP server; its link confirms the address.
        verification = wait_for_mail(mail, "ada@example.org", "Confirm your email address")
        assert verification.get_body(preferencelist=("html",)) is not None
        page.goto(link_in(verification, "/confirm-email/"))
        page.click("button[type=submit]")

        # No workspace yet: name one, and land on the getting-started checklist.
        page.wait_for_url("**/account/welcome/")
        shot(page, "welcome-desktop.png")
        page.fill("#id_create-name", "Ada Lab")
        page.click("button:has-text('Create workspace')")
        page.wait_for_url("**/clusters/")
        checklist = page.locator("#getting-started")
        assert checklist.locator("li[data-done=false]").count() == 3

        # Top up (development top-up: DEBUG on, no Stripe keys), add a key, create a cluster.
        page.goto("/billing/")
        page.click("button:has-text('Add $50 (dev)')")
        page.goto("/clusters/")
        assert page.locator("#getting-started li[data-done=true]").count() == 1
        page.goto("/account/ssh-keys/")
        page.fill("#id_name", "laptop")
        page.fill("#id_public_key", key)
        page.click("button:has-text('Add')")
        page.locator("text=Added key laptop").wait_for()
        page.goto("/offers/")
        page.fill("#machines", "2")
        page.press("#machines", "Enter")
        page.locator("#offer-results li.offer").first.get_by_role("link", name="Configure").click()
        page.wait_for_url("**/clusters/new/**")
        page.fill("#id_name", "first-run")
        page.click("button:has-text('Create cluster')")
        page.wait_for_url("**/clusters/*/")
        page.goto("/clusters/")
        assert page.locator("#getting-started").count() == 0  # every step done: it is gone
        assert page.locator("#cluster-list", has_text="first-run").count() == 1

        # Invite a teammate by email as a Developer.
        page.goto("/account/members/")
        page.fill("#id_email", "bob@example.org")
        page.select_option("#id_role", "developer")
        page.click("button:has-text('Send invitation')")
        page.locator("#pending-invitations", has_text="bob@example.org").wait_for()
        invitation = wait_for_mail(mail, "bob@example.org", "invited you to Ada Lab")
        accept_url = link_in(invitation, "/account/invitations/")
        # Ada's own session cannot use Bob's link.
        response = page.goto(accept_url)
        assert response.status == 403 and "for someone else" in page.inner_text("#invitation")

        # Bob, in his own browser, signs up through the link: his address is the invited one,
        # so no second verification email; he comes back to the invitation and joins.
        bob = browser.new_context(base_url=stack.url)
        watch_policy(bob, violations)
        bob_page = bob.new_page()
        bob_page.set_default_timeout(30_000)
        bob_page.goto(accept_url)
        bob_page.click("a:has-text('Create an account')")
        assert bob_page.input_value("#id_email") == "bob@example.org"
        bob_page.fill("#id_password1", PASSWORD + "-bob")
        bob_page.fill("#id_password2", PASSWORD + "-bob")
        bob_page.click("button:has-text('Create account')")
        bob_page.wait_for_url("**/account/invitations/**")
        bob_page.click("button:has-text('Join Ada Lab')")
        bob_page.wait_for_url("**/clusters/")

        # Both see the same cluster list.
        page.goto("/clusters/")
        for who in (page, bob_page):
            assert who.locator("#cluster-list a", has_text="first-run").count() == 1
        assert "Ada Lab · Developer" in bob_page.locator("#workspace-switch").inner_text()

        # The link is spent: opening it again says so.
        response = bob_page.goto(accept_url)
        assert response.status == 410 and "no longer works" in bob_page.inner_text("#invitation")
        assert not [m for m in mail.inbox.to("bob@example.org") if "Confirm your email" in subject_of(m)]
        assert violations == []
    except Exception:
        print("web log:\n" + stack.log("web") + "\nworker log:\n" + stack.log("worker"))
        raise


@pytest.fixture
def grace(db):
    workspace = WorkspaceFactory(name="Grace Lab")
    user = UserFactory(username="grace", email="grace@example.org")
    MembershipFactory(workspace=workspace, user=user, role=Role.OWNER)
    return user


def sign_in(page, login: str, password: str) -> None:
    page.goto("/login/")
    page.fill("#id_login", login)
    page.fill("#id_password", password)
    page.click("button:has-text('Sign in')")


def test_two_factor_set_up_then_sign_in_asks_for_the_code(grace, stack):
    with chromium() as browser:
        set_up_two_factor_and_sign_in(browser, stack)
    assert Authenticator.objects.filter(user=grace, type=Authenticator.Type.TOTP).count() == 1
    recovery = Authenticator.objects.get(user=grace, type=Authenticator.Type.RECOVERY_CODES).wrap()
    assert len(recovery.get_unused_codes()) == 9  # one was used to sign in


def set_up_two_factor_and_sign_in(browser, stack) -> None:
    violations: list[str] = []
    try:
        context = browser.new_context(base_url=stack.url)
        watch_policy(context, violations)
        page = context.new_page()
        page.set_default_timeout(30_000)
        sign_in(page, "grace@example.org", "pw")
        page.wait_for_url("**/clusters/")

        page.goto("/account/workspaces/")
        page.click("a:has-text('Two-factor authentication')")
        page.click("a:has-text('Activate')")
        # Turning on two-factor asks for the password again, even right after signing in.
        page.wait_for_url("**/reauthenticate/**")
        page.fill("#id_password", "pw")
        page.click("button[type=submit]")
        page.wait_for_url("**/2fa/totp/activate/")
        # The QR code is an image (data: URI) and no page script is inline (CSP).
        assert page.get_attribute("img.qr", "src").startswith("data:image/svg+xml")
        assert page.locator("script:not([src])").count() == 0
        shot(page, "totp-setup-desktop.png")
        secret = page.inner_text("#totp-secret").strip()
        page.fill("#id_code", "000000" if totp(secret) != "000000" else "111111")
        page.click("button:has-text('Turn on two-factor')")
        assert page.locator(".field-error").count() == 1  # a wrong code is refused
        code, activation_step = fresh_code(secret)
        page.fill("#id_code", code)
        page.click("button:has-text('Turn on two-factor')")
        page.locator("#recovery-code-list").wait_for(timeout=60_000)
        codes = page.inner_text("#recovery-code-list").split()
        assert len(codes) == 10 and page.locator("#copy-recovery-codes[data-copy]").count() == 1
        assert page.locator("script:not([src])").count() == 0

        page.click("button:has-text('Sign out')")
        sign_in(page, "grace", "pw")
        page.wait_for_url("**/2fa/authenticate/**")
        page.fill("#id_code", "123456" if totp(secret) != "123456" else "654321")
        page.click("button[type=submit]")
        assert page.locator("[role=alert]").count() >= 1 and "/2fa/authenticate/" in page.url
        page.fill("#id_code", fresh_code(secret, not_in_step=activation_step)[0])
        page.click("button[type=submit]")
        page.wait_for_url("**/clusters/", timeout=60_000)

        # A recovery code works in place of the app, once.
        page.click("button:has-text('Sign out')")
        sign_in(page, "grace", "pw")
        page.wait_for_url("**/2fa/authenticate/**")
        page.fill("#id_code", codes[0])
        page.click("button[type=submit]")
        page.wait_for_url("**/clusters/")
        assert violations == []  # the QR code (a data: image) and every page pass the policy
    except Exception:
        print("web log:\n" + stack.log("web"))
        raise


def test_a_forgotten_password_is_reset_through_the_emailed_link(grace, stack, mail):
    with chromium() as browser:
        reset_password(browser, stack, mail)
    grace.refresh_from_db()
    assert grace.check_password("new-" + PASSWORD)


def reset_password(browser, stack, mail) -> None:
    try:
        page = browser.new_context(base_url=stack.url).new_page()
        page.set_default_timeout(30_000)
        page.goto("/login/")
        page.click("a:has-text('Forgot your password?')")
        page.fill("#id_email", "grace@example.org")
        page.click("button[type=submit]")
        message = wait_for_mail(mail, "grace@example.org", "Reset your Runcrate Clusters password")
        page.goto(link_in(message, "/password/reset/key/"))
        page.fill("#id_password1", "new-" + PASSWORD)
        page.fill("#id_password2", "new-" + PASSWORD)
        page.click("button[type=submit]")
        page.locator("text=password is now changed").wait_for()

        sign_in(page, "grace", "pw")
        assert page.locator(".form-error").count() == 1  # the old password no longer works
        sign_in(page, "grace", "new-" + PASSWORD)
        page.wait_for_url("**/clusters/")
    except Exception:
        print("web log:\n" + stack.log("web"))
        raise
