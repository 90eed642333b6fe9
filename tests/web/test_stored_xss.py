"""Stored XSS: text a Developer typed (a key, volume, workspace or member name) reaches an
Owner's page as escaped text only — never inside inline JavaScript — and every page carries
a Content-Security-Policy that refuses inline script and event handlers."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest
from django.urls import reverse

from accounts.models import Membership, Role, SSHKey
from api import keys
from clusters.models import Volume
from clusters.services.create import create_cluster
from tests.factories import MembershipFactory, UserFactory
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db

PAYLOAD = "x');alert(document.cookie);//<img src=x onerror=alert(1)>\""
PAGES = [
    "clusters:list", "clusters:create", "clusters:volumes", "offers:list", "accounts:members",
    "accounts:ssh_keys", "accounts:environments", "api:keys", "billing:overview", "notifications:settings",
]


class InlineScript(HTMLParser):
    """Collects what a browser would run from the page itself: on…= handlers, <script> bodies,
    javascript: URLs, and htmx's eval'd hx-on attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name.startswith("on") or name.startswith("hx-on") or (value or "").strip().lower().startswith("javascript:"):
                self.found.append(f"<{tag} {name}={value!r}>")
        if tag == "script" and not dict(attrs).get("src"):
            self.found.append("<script> without src")


def inline_script(text: str) -> list[str]:
    parser = InlineScript()
    parser.feed(text)
    return parser.found


@pytest.fixture
def planted(workspace, environment, owner, machine_type):
    """Everything a Developer can name, named with a payload."""
    developer = UserFactory(username="dev")
    MembershipFactory(workspace=workspace, user=developer, role=Role.DEVELOPER)
    member = UserFactory(username="m")
    MembershipFactory(workspace=workspace, user=member, role=Role.DEVELOPER)
    # Usernames are validated on sign-up; the row is written directly to show rendering alone
    # must be safe.
    type(member).objects.filter(pk=member.pk).update(username=PAYLOAD[:150])
    workspace.name = PAYLOAD
    workspace.save()
    SSHKey.objects.create(workspace=workspace, name=PAYLOAD, public_key="ssh-ed25519 AAAA", fingerprint="SHA256:x")
    Volume.objects.create(workspace=workspace, environment=environment, name=PAYLOAD)
    keys.create_api_key(workspace=workspace, created_by=owner, name=PAYLOAD)
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=2, created_by=owner,
    )
    return cluster


@pytest.mark.parametrize("page", PAGES)
def test_a_planted_name_renders_escaped_and_no_inline_script_or_handler_is_on_the_page(owner, planted, page):
    response = client_for(owner).get(reverse(page))

    assert response.status_code == 200
    text = response.content.decode()
    assert PAYLOAD not in text
    assert inline_script(text) == []


def test_the_confirmations_carry_the_name_as_an_escaped_attribute(owner, planted):
    owner_client = client_for(owner)
    escaped = html.escape(PAYLOAD, quote=True)
    for page in ("accounts:ssh_keys", "clusters:volumes", "api:keys", "accounts:members"):
        text = owner_client.get(reverse(page)).content.decode()
        assert re.search(r'data-confirm="[^"]*' + re.escape(escaped), text), page


def test_the_cluster_detail_page_has_no_inline_script(owner, planted):
    text = client_for(owner).get(reverse("clusters:detail", args=[planted.pk])).content.decode()
    assert inline_script(text) == []


@pytest.mark.parametrize("url", ["/clusters/", "/login/", "/quote/", "/api/v1/docs"])
def test_every_page_sends_a_policy_that_refuses_inline_script(owner, url):
    response = client_for(owner).get(url)
    policy = dict(
        (part.split(" ", 1) + [""])[:2] for part in (p.strip() for p in response["Content-Security-Policy"].split(";"))
    )
    assert policy["script-src"] == "'self'"
    assert policy["script-src-attr"] == "'none'"
    assert "unsafe-eval" not in response["Content-Security-Policy"]
    assert policy["frame-ancestors"] == "'none'"


def test_the_page_tells_htmx_not_to_eval_attribute_code(owner):
    text = client_for(owner).get("/clusters/").content.decode()
    assert '"allowEval": false' in text and '"allowScriptTags": false' in text


def test_a_member_can_still_be_removed_after_the_page_confirms(owner, workspace, planted):
    victim = Membership.objects.get(workspace=workspace, user__username=PAYLOAD[:150])
    client_for(owner).post(reverse("accounts:member_remove", args=[victim.pk]))
    assert not Membership.objects.filter(pk=victim.pk).exists()
