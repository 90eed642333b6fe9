"""The audit log on the dashboard side: actions from pages, sign-ins, failures that record
nothing, nobody (not even an Owner or the admin) changing an entry, retention, and the page."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.db.utils import DatabaseError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from accounts import services as accounts
from accounts.models import Membership, Role
from audit.models import AuditEvent, AuditLogImmutable
from audit.recording import record
from audit.retention import prune_expired
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def manager(workspace):
    return MembershipFactory(workspace=workspace, role=Role.MANAGER, user=UserFactory(username="mona")).user


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def only(workspace, action: str) -> AuditEvent:
    [entry] = AuditEvent.objects.filter(workspace=workspace, action=action)
    return entry


# -- recording ------------------------------------------------------------------------------------


def test_a_budget_set_on_the_page_is_one_entry_by_the_member_with_before_and_after(owner, workspace, environment):
    response = signed_in(owner).post(reverse("accounts:environment_budget", args=[environment.pk]),
                                     {"monthly_budget": "250.00"}, REMOTE_ADDR="127.0.0.9")
    assert response.status_code in (200, 302)
    entry = only(workspace, "environment.budget_change")
    assert (entry.actor, entry.actor_kind, entry.surface, entry.client_address) == ("alice", "member", "page", "127.0.0.9")
    assert entry.changes == {"monthly_budget": [str(environment.monthly_budget), "250.00"]}
    assert entry.object_type == "environment" and entry.object_id == str(environment.pk)


def test_a_role_change_by_the_owner_is_recorded_and_a_refused_one_is_not(owner, developer, workspace):
    dave = Membership.objects.get(user=developer, workspace=workspace)
    signed_in(owner).post(reverse("accounts:member_role", args=[dave.pk]), {"role": "manager"})
    entry = only(workspace, "member.role_change")
    assert entry.changes == {"role": ["developer", "manager"]} and entry.object_label == "dave"
    # A Developer may not change roles: refused, nothing recorded.
    me = Membership.objects.get(user=owner, workspace=workspace)
    signed_in(developer).post(reverse("accounts:member_role", args=[me.pk]), {"role": "developer"})
    assert AuditEvent.objects.filter(workspace=workspace, action="member.role_change").count() == 1


def test_an_action_that_fails_after_recording_leaves_no_entry(owner, workspace, environment):
    """The entry is in the change's transaction: a failure later in it takes both back."""
    with pytest.raises(RuntimeError), transaction.atomic():
        accounts.set_budget(by=Membership.objects.get(user=owner), environment=environment,
                            monthly_budget=Decimal("5.00"))
        raise RuntimeError("the rest of the action failed")
    assert not AuditEvent.objects.filter(workspace=workspace).exists()
    environment.refresh_from_db()
    assert environment.monthly_budget != Decimal("5.00")


def test_sign_ins_and_refused_passwords_are_recorded_in_each_workspace_of_the_account(owner, workspace):
    other = MembershipFactory(user=owner, role=Role.DEVELOPER).workspace
    browser = Client()
    assert browser.post(reverse("login"), {"login": "alice", "password": "wrong"}).status_code == 200
    assert browser.post(reverse("login"), {"login": "alice", "password": "pw"}).status_code == 302
    for where in (workspace, other):
        failed = only(where, "account.sign_in_failed")
        assert failed.actor_kind == "unverified" and failed.object_label == "alice" and failed.client_address
        ok = only(where, "account.sign_in")
        assert (ok.actor, ok.surface) == ("alice", "page")
    assert "wrong" not in str(list(AuditEvent.objects.values()))


def test_an_unknown_login_names_no_workspace_and_records_nothing(workspace):
    Client().post(reverse("login"), {"login": "nobody-here", "password": "x"})
    assert not AuditEvent.objects.exists()


# -- nobody changes it ------------------------------------------------------------------------------


def _entry(workspace) -> AuditEvent:
    return record(workspace.pk, "workspace.rename", workspace, before={"name": "a"}, after={"name": "b"})


def test_the_orm_refuses_to_update_or_delete_an_entry(workspace):
    entry = _entry(workspace)
    entries = AuditEvent.objects.filter(pk=entry.pk)
    with pytest.raises(AuditLogImmutable):
        entries.update(actor="someone else")
    with pytest.raises(AuditLogImmutable):
        entries.delete()
    entry.actor = "someone else"
    with pytest.raises(AuditLogImmutable):
        entry.save()
    with pytest.raises(AuditLogImmutable):
        entry.delete()
    with pytest.raises(AuditLogImmutable):
        AuditEvent.objects.bulk_update([entry], ["actor"])
    assert AuditEvent.objects.get(pk=entry.pk).actor == "Runcrate"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the trigger is PostgreSQL's")
def test_the_database_refuses_raw_sql_updates_and_deletes(workspace):
    entry = _entry(workspace)
    for sql in ("UPDATE audit_auditevent SET actor = 'x' WHERE id = %s", "DELETE FROM audit_auditevent WHERE id = %s"):
        with pytest.raises(DatabaseError, match="cannot be changed or deleted"), transaction.atomic(), \
                connection.cursor() as cursor:
            cursor.execute(sql, [entry.pk])
    assert AuditEvent.objects.get(pk=entry.pk).actor == "Runcrate"


def test_the_admin_shows_entries_and_refuses_to_change_or_delete_them(workspace):
    entry = _entry(workspace)
    superuser = UserFactory(username="root", is_staff=True, is_superuser=True)
    admin = signed_in(superuser)
    assert admin.get(reverse("admin:audit_auditevent_changelist")).status_code == 200
    change = reverse("admin:audit_auditevent_change", args=[entry.pk])
    assert admin.post(change, {"actor": "forged", "action": "x"}).status_code == 403
    assert admin.post(reverse("admin:audit_auditevent_delete", args=[entry.pk]), {"post": "yes"}).status_code == 403
    assert admin.post(reverse("admin:audit_auditevent_changelist"),
                      {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"}).status_code in (200, 302)
    assert AuditEvent.objects.get(pk=entry.pk).actor == "Runcrate"


def test_entries_past_the_retention_are_pruned_and_newer_ones_kept(workspace, settings):
    settings.AUDIT_RETENTION_DAYS = 400
    now = timezone.now()
    AuditEvent.objects.bulk_create([
        AuditEvent(workspace=workspace, created_at=now - dt.timedelta(days=days), actor="a", actor_kind="member",
                   surface="page", action="ssh_key.add", object_type="sshkey", object_id=str(days))
        for days in (401, 399, 1)])
    assert prune_expired(now) == 1
    assert sorted(AuditEvent.objects.values_list("object_id", flat=True)) == ["1", "399"]


# -- the page -----------------------------------------------------------------------------------


def test_owners_and_managers_read_the_page_developers_and_outsiders_do_not_see_it(owner, manager, developer,
                                                                                   outsider, workspace):
    row = f'id="audit-{_entry(workspace).pk}"'.encode()
    url = reverse("audit:log")
    for user in (owner, manager):
        page = signed_in(user).get(url)
        assert page.status_code == 200 and row in page.content
        assert b'href="/account/audit/"' in page.content  # the nav link
    developer_page = signed_in(developer)
    assert developer_page.get(url).status_code == 404
    assert developer_page.get(reverse("audit:export")).status_code == 404
    assert b'href="/account/audit/"' not in developer_page.get(reverse("accounts:members")).content
    # An outsider is the Owner of their own workspace: they see its log, never this one's.
    assert row not in signed_in(outsider).get(url).content


def test_the_page_filters_pages_and_exports_csv(owner, workspace):
    now = timezone.now()
    AuditEvent.objects.bulk_create([
        AuditEvent(workspace=workspace, created_at=now - dt.timedelta(seconds=i), actor="bob" if i % 2 else "alice",
                   actor_kind="member", surface="page", action="ssh_key.add", object_type="sshkey",
                   object_id=str(i), object_label="=cmd|' /C calc'!A0" if i == 0 else f"key {i}")
        for i in range(120)])
    browser = signed_in(owner)
    first = browser.get(reverse("audit:log"), {"actor": "bob"})
    assert first.status_code == 200 and len(first.context["entries"]) == 50
    assert {e.actor for e in first.context["entries"]} == {"bob"} and first.context["next_cursor"]
    second = browser.get(reverse("audit:log"), {"actor": "bob", "cursor": first.context["next_cursor"]})
    assert not {e.pk for e in first.context["entries"]} & {e.pk for e in second.context["entries"]}
    assert browser.get(reverse("audit:log"), {"since": "not a date"}).status_code == 400
    export = browser.get(reverse("audit:export"), {"actor": "alice"})
    lines = b"".join(export.streaming_content).decode().splitlines()  # type: ignore[attr-defined]
    assert lines[0].startswith("time,actor") and len(lines) == 61
    assert "'=cmd" in lines[1]  # a formula is written as text
