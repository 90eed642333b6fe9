from __future__ import annotations

import pytest

from notifications.kinds import Kind
from notifications.models import NotificationPreference
from notifications.services import enabled_kinds

URL = "/account/notifications/"
pytestmark = pytest.mark.django_db


def test_it_needs_a_login(client):
    response = client.get(URL)
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_top_bar_links_to_it(owner_client):
    assert f'href="{URL}"'.encode() in owner_client.get("/clusters/").content


def test_every_optional_kind_is_on_by_default_and_critical_ones_cannot_be_unticked(owner_client, owner):
    response = owner_client.get(URL)
    html = response.content.decode()
    assert 'value="cluster_ready"' in html and 'value="topup_received"' in html
    assert 'value="cluster_failed"' not in html  # shown, but as a disabled box with no value to post
    assert "Cluster failed to start" in html
    assert enabled_kinds(owner) >= {Kind.CLUSTER_READY, Kind.CLUSTER_TERMINATED, Kind.BALANCE_LOW}


def test_a_member_turns_kinds_off_for_themselves_only(owner_client, owner, developer):
    response = owner_client.post(URL, {"enabled": [Kind.CLUSTER_READY, Kind.CLUSTER_FAILED]})
    assert response.status_code == 302
    assert enabled_kinds(owner) == {Kind.CLUSTER_READY}
    assert Kind.TOPUP_RECEIVED in enabled_kinds(developer)
    # A critical kind posted by hand is never stored as a choice.
    assert not NotificationPreference.objects.filter(kind=Kind.CLUSTER_FAILED).exists()
    owner_client.post(URL, {"enabled": [Kind.TOPUP_RECEIVED]})
    assert enabled_kinds(owner) == {Kind.TOPUP_RECEIVED}
