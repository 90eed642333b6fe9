"""Wrong passwords slow down the client that sends them, for that account, with a doubling
wait; nobody can lock someone else out of their account by guessing at it."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts import signin_throttle

pytestmark = pytest.mark.django_db

ATTACKER = "203.0.113.66"


@pytest.fixture(autouse=True)
def fresh_counts():
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def clock(monkeypatch):
    class Clock:
        now = 1_800_000_000.0

    monkeypatch.setattr(signin_throttle.time, "time", lambda: Clock.now)
    return Clock


def sign_in(client: Client, password: str, login: str = "alice"):
    return client.post(reverse("login"), {"login": login, "password": password})


def test_someone_elses_wrong_passwords_never_keep_the_owner_out(owner):
    attacker = Client(REMOTE_ADDR=ATTACKER)
    for _ in range(12):
        sign_in(attacker, "guess")
    own = Client()
    response = sign_in(own, "pw")
    assert response.status_code == 302 and own.session["_auth_user_id"] == str(owner.pk)


def test_the_guessing_client_waits_longer_after_each_failure(owner, clock):
    attacker = Client(REMOTE_ADDR=ATTACKER)
    for _ in range(5):
        sign_in(attacker, "guess")
    refused = sign_in(attacker, "pw")  # even the right password waits its turn
    assert "Try again in 1 second." in refused.text and "_auth_user_id" not in attacker.session
    clock.now += 1
    sign_in(attacker, "guess")  # the 6th failure
    assert "Try again in 2 seconds" in sign_in(attacker, "guess").text
    clock.now += 2
    sign_in(attacker, "guess")  # the 7th
    assert "Try again in 4 seconds" in sign_in(attacker, "guess").text


def test_the_wait_is_capped_and_a_success_starts_over(owner, clock, settings):
    settings.SIGNIN_BACKOFF_MAX_SECONDS = 60
    assert signin_throttle.backoff_seconds(40) == 60
    client = Client()
    for _ in range(5):
        sign_in(client, "guess")
    clock.now += 1
    assert sign_in(client, "pw").status_code == 302
    client.logout()
    assert "Too many" not in sign_in(client, "guess").text  # counting from zero again


def test_a_client_slowed_on_one_account_signs_in_to_another(owner, developer):
    shared = Client(REMOTE_ADDR=ATTACKER)
    for _ in range(6):
        sign_in(shared, "guess")
    assert sign_in(shared, "pw", login="dave").status_code == 302
