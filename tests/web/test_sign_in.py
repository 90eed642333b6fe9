"""Signing in and out."""

from __future__ import annotations

import pytest
from django.urls import reverse

pytestmark = pytest.mark.django_db


def test_a_member_signs_in_and_lands_on_the_clusters(client, owner):
    response = client.post(reverse("login"), {"login": "alice", "password": "pw"})
    assert response.status_code == 302 and response["Location"] == reverse("clusters:list")


def test_a_wrong_password_is_refused_on_the_form(client, owner):
    response = client.post(reverse("login"), {"login": "alice", "password": "nope"})
    assert response.status_code == 200
    assert 'role="alert"' in response.text
    assert "_auth_user_id" not in client.session


def test_sign_in_returns_to_the_page_asked_for(client, owner):
    target = reverse("offers:list")
    response = client.post(reverse("login") + f"?next={target}", {"login": "alice", "password": "pw", "next": target})
    assert response["Location"] == target


def test_sign_out_needs_post_and_ends_the_session(owner_client):
    response = owner_client.post(reverse("logout"))
    assert response.status_code == 302
    assert owner_client.get(reverse("clusters:list")).status_code == 302
