"""The audit log over the API: every action recorded once with its actor and surface, the list
with its filters and cursor, and who may read it."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from accounts.models import Membership, Role
from audit.models import AuditEvent
from tests.api.conftest import drive, error_of, make_cluster

pytestmark = pytest.mark.django_db

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl laptop"


def entries(workspace, action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(workspace=workspace, action=action))


def test_a_terminate_from_the_cli_is_one_entry_naming_the_key_the_surface_and_the_change(api, owner_key, workspace,
                                                                                          environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    status, _ = api.call("DELETE", f"/clusters/{cluster.pk}", headers={"X-Runcrate-Client": "cli"})
    assert status in (200, 202)
    [entry] = entries(workspace, "cluster.terminate")
    assert entry.actor == owner_key[:16] and entry.actor_kind == "api_key"
    assert entry.surface == "cli" and entry.client_address == "127.0.0.1"
    assert entry.object_type == "cluster" and entry.object_id == str(cluster.pk) and entry.object_label == "train"
    assert entry.changes["status"] == ["ready", "terminating"]
    # The cluster event of the terminate links to this entry, and the API says so.
    assert entry.cluster_event is not None and entry.cluster_event.event == "terminating"
    events = api.get(f"/clusters/{cluster.pk}/events", limit=200)[1]["data"]
    assert [e["audit_event_id"] for e in events if e["event"] == "terminating"] == [entry.pk]
    # The create ran without a request (the reconciler's tests call the service): the product itself.
    [created] = entries(workspace, "cluster.create")
    assert created.actor_kind == "system" and created.surface == "system" and created.changes["machines"] == [None, 2]


def test_a_second_terminate_that_changes_nothing_records_nothing(api, workspace, environment, machine_type):
    cluster = make_cluster(environment, machine_type)
    drive(cluster)
    api.delete(f"/clusters/{cluster.pk}")
    api.delete(f"/clusters/{cluster.pk}")
    assert len(entries(workspace, "cluster.terminate")) == 1


def test_the_surface_is_mcp_or_plain_api_as_the_client_says(api, workspace):
    api.post("/ssh-keys", {"name": "laptop", "public_key": ED25519}, headers={"X-Runcrate-Client": "mcp"})
    key_id = AuditEvent.objects.get(action="ssh_key.add").object_id
    api.delete(f"/ssh-keys/{key_id}")
    assert [(e.action, e.surface) for e in AuditEvent.objects.filter(workspace=workspace).order_by("id")
            if e.action.startswith("ssh_key")] == [("ssh_key.add", "mcp"), ("ssh_key.delete", "api")]
    added = entries(workspace, "ssh_key.add")[0]
    assert added.changes["name"] == [None, "laptop"] and added.changes["fingerprint"][1].startswith("SHA256:")


def test_a_refused_action_records_nothing(api, workspace, owner):
    me = Membership.objects.get(workspace=workspace, user=owner)
    status, _ = api.call("PATCH", f"/members/{me.pk}", {"role": "developer"})
    assert status == 400  # the last Owner stays
    assert not entries(workspace, "member.role_change")


def test_a_new_api_key_is_logged_by_its_prefix_and_never_its_secret(api, workspace):
    status, body = api.post("/api-keys", {"name": "ci"})
    assert status == 201
    raw = body["data"]["key"]
    [entry] = [e for e in entries(workspace, "api_key.create") if e.surface == "api"]  # the fixture made one too
    assert entry.object_label == raw[:16]
    stored = str(AuditEvent.objects.filter(pk=entry.pk).values().get())
    assert raw not in stored and raw[16:] not in stored


def test_webhook_secrets_and_url_queries_are_never_logged(api, workspace, settings):
    settings.WEBHOOK_ALLOW_LOOPBACK = True
    status, body = api.post("/webhooks", {"url": "http://127.0.0.1:9/hook?token=hunter2", "events": ["cluster.ready"]})
    assert status == 201, body
    api.post(f"/webhooks/{body['data']['id']}/rotate-secret")
    logged = str(list(AuditEvent.objects.filter(workspace=workspace).values()))
    assert "hunter2" not in logged and body["data"]["secret"] not in logged
    assert [e.action for e in AuditEvent.objects.filter(workspace=workspace, object_type="endpoint").order_by("id")] == [
        "webhook.create", "webhook.rotate_secret"]


# -- the list ---------------------------------------------------------------------------------


def _fill(workspace, count: int, **fields) -> None:
    now = timezone.now()
    AuditEvent.objects.bulk_create([
        AuditEvent(workspace=workspace, created_at=now - dt.timedelta(minutes=i), actor=fields.get("actor", "alice"),
                   actor_kind="member", surface="page", action=fields.get("action", "ssh_key.add"),
                   object_type=fields.get("object_type", "sshkey"), object_id=str(i))
        for i in range(count)])


def test_the_list_follows_its_cursor_newest_first_without_repeats(api, workspace):
    _fill(workspace, 7)
    seen, cursor = [], None
    while True:
        status, body = api.get("/audit-events", action="ssh_key.add", limit=3, **({"cursor": cursor} if cursor else {}))
        assert status == 200 and set(body["meta"]) == {"limit", "next_cursor"}
        seen += [e["object_id"] for e in body["data"]]
        cursor = body["meta"]["next_cursor"]
        if not cursor:
            break
    assert seen == [str(i) for i in range(7)]


def test_the_list_filters_by_actor_action_object_and_time(api, workspace):
    _fill(workspace, 3)
    _fill(workspace, 2, actor="bob", action="cluster.terminate", object_type="cluster")
    assert {e["actor"] for e in api.get("/audit-events", actor="bob")[1]["data"]} == {"bob"}
    assert len(api.get("/audit-events", action="cluster")[1]["data"]) == 2
    assert len(api.get("/audit-events", action="cluster.terminate")[1]["data"]) == 2
    assert [e["object_id"] for e in api.get("/audit-events", object="cluster:1")[1]["data"]] == ["1"]
    since = (timezone.now() - dt.timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    assert {e["object_id"] for e in api.get("/audit-events", since=since, action="ssh_key")[1]["data"]} == {"0"}


def test_a_bad_cursor_or_date_is_a_400_on_its_field(api):
    status, body = api.get("/audit-events", cursor="not-a-cursor")
    assert status == 400 and "cursor" in error_of(body)["details"]
    status, body = api.get("/audit-events", since="yesterday")
    assert status == 400 and "since" in error_of(body)["details"]


def test_a_developer_key_is_refused_and_another_workspace_sees_none_of_it(dev_api, outsider_api, api, workspace):
    _fill(workspace, 2)
    status, body = dev_api.get("/audit-events")
    assert status == 403 and error_of(body)["code"] == "forbidden"
    status, body = outsider_api.get("/audit-events")
    assert status == 200 and all(e["actor"] != "alice" for e in body["data"])


def test_a_manager_reads_it(workspace, api):
    from api.keys import create_api_key
    from tests.api.conftest import ApiClient
    from tests.factories import MembershipFactory, UserFactory

    manager = MembershipFactory(workspace=workspace, role=Role.MANAGER, user=UserFactory(username="mona")).user
    _fill(workspace, 1)
    status, body = ApiClient(create_api_key(workspace=workspace, created_by=manager, name="m")[1]).get("/audit-events")
    assert status == 200 and body["data"]
