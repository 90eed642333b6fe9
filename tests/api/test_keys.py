"""API keys: made on the Keys page, shown once, stored hashed, switched off and on, deleted."""

from __future__ import annotations

import datetime as dt
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounts.models import Membership
from api.keys import create_api_key
from api.models import ApiKey, hash_key
from tests.api.conftest import ApiClient, error_of

pytestmark = pytest.mark.django_db


def make_key_on_page(client, name: str = "laptop") -> str:
    response = client.post(reverse("api:keys"), {"name": name}, follow=True)
    assert response.status_code == 200
    return response.context["new_key"]["key"]


def test_a_key_made_on_the_page_is_shown_once_and_stored_hashed(owner_client, workspace):
    raw = make_key_on_page(owner_client)
    assert raw.startswith("rc_live_") and len(raw) > 40
    api_key = ApiKey.objects.get(workspace=workspace)
    assert api_key.key_hash == hash_key(raw)
    assert raw not in str(list(ApiKey.objects.values()))
    again = owner_client.get(reverse("api:keys"))
    assert raw not in again.content.decode()
    assert api_key.prefix in again.content.decode()
    assert raw.startswith(api_key.prefix)


def test_the_new_key_is_in_the_post_response_only_never_in_the_session_or_a_cache(owner_client):
    from django.contrib.sessions.models import Session

    response = owner_client.post(reverse("api:keys"), {"name": "laptop"})

    assert response.status_code == 200
    raw = response.context["new_key"]["key"]
    assert raw in response.content.decode()
    assert "no-store" in response["Cache-Control"]
    assert not any(raw in str(s.get_decoded()) for s in Session.objects.all())
    assert raw not in owner_client.get(reverse("api:keys")).content.decode()


def test_the_key_works_and_records_when_it_was_last_used(owner_client):
    raw = make_key_on_page(owner_client)
    assert ApiKey.objects.get().last_used_at is None
    status, _ = ApiClient(raw).get("/gpu-types")
    assert status == 200
    assert ApiKey.objects.get().last_used_at is not None
    assert "never" not in owner_client.get(reverse("api:keys")).content.decode().split("<tbody>")[1]


def test_a_key_used_again_within_the_minute_sends_no_statement_about_its_use(owner_client):
    raw = make_key_on_page(owner_client)
    assert ApiClient(raw).get("/gpu-types")[0] == 200
    first = ApiKey.objects.get().last_used_at
    assert first is not None
    with CaptureQueriesContext(connection) as queries:
        assert ApiClient(raw).get("/gpu-types")[0] == 200
    assert not [q["sql"] for q in queries.captured_queries if "last_used_at" in q["sql"] and "UPDATE" in q["sql"]]
    assert ApiKey.objects.get().last_used_at == first
    ApiKey.objects.update(last_used_at=first - dt.timedelta(minutes=2))
    assert ApiClient(raw).get("/gpu-types")[0] == 200
    latest = ApiKey.objects.get().last_used_at
    assert latest is not None and latest > first


def test_a_deactivated_key_answers_401_until_reactivated(owner_client):
    raw = make_key_on_page(owner_client)
    api_key = ApiKey.objects.get()
    owner_client.post(reverse("api:key_deactivate", args=[api_key.pk]))
    status, body = ApiClient(raw).get("/clusters")
    assert status == 401
    assert "deactivated" in error_of(body)["message"]
    owner_client.post(reverse("api:key_reactivate", args=[api_key.pk]))
    assert ApiClient(raw).get("/clusters")[0] == 200


def test_a_deleted_key_answers_401(owner_client):
    raw = make_key_on_page(owner_client)
    owner_client.post(reverse("api:key_delete", args=[ApiKey.objects.get().pk]))
    assert not ApiKey.objects.exists()
    status, body = ApiClient(raw).get("/clusters")
    assert status == 401 and error_of(body)["code"] == "unauthenticated"


def test_a_developer_cannot_switch_off_the_owners_key_but_can_their_own(client, owner, developer, workspace):
    _, _ = create_api_key(workspace=workspace, created_by=owner, name="owner's")
    owners = ApiKey.objects.get(name="owner's")
    client.force_login(developer)
    assert client.post(reverse("api:key_deactivate", args=[owners.pk])).status_code == 404
    assert ApiKey.objects.get(pk=owners.pk).is_active
    make_key_on_page(client, "mine")
    mine = ApiKey.objects.get(name="mine")
    assert client.post(reverse("api:key_deactivate", args=[mine.pk])).status_code == 302
    assert not ApiKey.objects.get(pk=mine.pk).is_active


def test_an_outsider_neither_sees_nor_touches_the_workspaces_keys(client, owner, outsider, workspace):
    create_api_key(workspace=workspace, created_by=owner, name="secret-ci")
    api_key = ApiKey.objects.get()
    client.force_login(outsider)
    assert "secret-ci" not in client.get(reverse("api:keys")).content.decode()
    assert client.post(reverse("api:key_delete", args=[api_key.pk])).status_code == 404
    assert ApiKey.objects.filter(pk=api_key.pk).exists()


def test_a_key_stops_working_when_its_creator_leaves_the_workspace(owner_key, owner, workspace):
    Membership.objects.filter(user=owner, workspace=workspace).delete()
    status, body = ApiClient(owner_key).get("/clusters")
    assert status == 401
    assert "no longer a member" in error_of(body)["message"]


def test_the_keys_page_needs_a_login(client):
    assert client.get(reverse("api:keys")).status_code == 302


def test_create_api_key_prints_a_working_key(owner, workspace):
    out = StringIO()
    call_command("create_api_key", "alice", "--name", "ops", stdout=out, stderr=StringIO())
    raw = out.getvalue().strip()
    assert raw.startswith("rc_live_")
    assert ApiKey.objects.get(name="ops").workspace == workspace
    assert ApiClient(raw).get("/clusters")[0] == 200


def test_create_api_key_refuses_unknown_users_and_foreign_workspaces(owner, outsider):
    with pytest.raises(CommandError, match="No user"):
        call_command("create_api_key", "nobody", stdout=StringIO(), stderr=StringIO())
    other_workspace = Membership.objects.get(user=outsider).workspace_id
    with pytest.raises(CommandError, match="not a member"):
        call_command("create_api_key", "alice", "--workspace", str(other_workspace), stdout=StringIO(), stderr=StringIO())
