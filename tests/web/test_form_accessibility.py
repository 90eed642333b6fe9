"""Fields render as Django's field groups (templates/django/forms/field.html): an invalid field
says so to assistive technology and names its error, and the parts of a cluster page that
the WebSocket replaces are polite live regions."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.urls import reverse

from clusters import live
from tests.web.conftest import client_for

pytestmark = pytest.mark.django_db


class Elements(HTMLParser):
    """Every element's attributes and the text inside it, keyed by id."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.text: dict[str, str] = {}
        self._open: list[str | None] = []
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        self.tags.append((tag, values))
        if tag not in ("input", "br", "img", "meta", "link", "hr"):
            self._open.append(values.get("id"))
            if values.get("id"):
                self.text.setdefault(values["id"], "")

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("input", "br", "img", "meta", "link", "hr") and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for ident in self._open:
            if ident:
                self.text[ident] += data

    def invalid(self) -> list[dict[str, str]]:
        return [attrs for _, attrs in self.tags if attrs.get("aria-invalid") == "true"]

    def by_id(self, ident: str) -> dict[str, str]:
        return next(attrs for _, attrs in self.tags if attrs.get("id") == ident)


def assert_invalid_fields_name_their_errors(html: str, expected: dict[str, str]) -> None:
    """`expected`: field name -> a phrase of its error message."""
    page = Elements(html)
    invalid = {attrs["name"]: attrs for attrs in page.invalid()}
    assert set(invalid) == set(expected), invalid
    for name, phrase in expected.items():
        described = invalid[name]["aria-describedby"].split()
        errors = [ident for ident in described if ident.endswith("_error")]
        assert errors == [f"id_{name}_error"], described
        assert phrase in page.text[errors[0]], page.text.get(errors[0])
        assert page.by_id(errors[0]).get("role") == "alert"
        for ident in described:  # every id it names is on the page
            assert ident in page.text


def test_an_invalid_ssh_key_field_is_marked_and_points_at_its_error(owner):
    response = client_for(owner).post(reverse("accounts:ssh_keys"), {"name": "laptop", "public_key": "not a key"})
    assert response.status_code == 200
    assert_invalid_fields_name_their_errors(response.text, {"public_key": "key"})


def test_the_create_form_marks_the_bad_name_and_keeps_the_help_text_described(owner_client, machine_type):
    response = owner_client.post(
        reverse("clusters:create"), {"name": "Not OK!", "offer": machine_type.pk, "machines": 2, "software": "none"}
    )
    assert response.status_code == 200
    assert_invalid_fields_name_their_errors(response.text, {"name": "ower"})
    name = next(attrs for attrs in Elements(response.text).invalid() if attrs["name"] == "name")
    assert "id_name_helptext" in name["aria-describedby"].split()


def test_sign_up_with_a_taken_address_marks_the_email_field(client, owner):
    owner.email = "alice@example.com"
    owner.save()
    response = client.post(reverse("account_signup"), {
        "email": "alice@example.com", "password1": "a long enough passphrase", "password2": "a long enough passphrase",
    })
    assert response.status_code == 200
    assert_invalid_fields_name_their_errors(response.text, {"email": "already"})


def test_a_valid_form_marks_nothing_invalid(owner):
    page = client_for(owner).get(reverse("accounts:ssh_keys")).text
    assert Elements(page).invalid() == []
    assert "_error" not in Elements(page).by_id("id_public_key").get("aria-describedby", "")


def test_the_parts_the_socket_replaces_are_polite_live_regions_on_the_page_and_in_every_push(owner_client, cluster):
    regions = ("status-card", "nodes-table", "events-list")
    page = Elements(owner_client.get(cluster.get_absolute_url()).text)
    for ident in regions:
        assert page.by_id(ident).get("aria-live") == "polite", ident
    [pushed, *_] = live.render_cluster_now(cluster.pk, live.PageState())
    pushed_page = Elements(pushed)
    for ident in regions:
        assert pushed_page.by_id(ident).get("aria-live") == "polite", ident
        assert pushed_page.by_id(ident).get("hx-swap-oob") == "true", ident
    listing = Elements(owner_client.get(reverse("clusters:list")).text)
    assert listing.by_id("cluster-rows").get("aria-live") == "polite"
