"""The audit log from a terminal and an agent, against the live server: what the CLI and the MCP
server do is recorded with their surface, and both read the log back."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from audit.models import AuditEvent
from tests.e2e_client.test_mcp_live import ED25519, call, refused, stdio

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_cli_records_its_actions_as_cli_and_reads_the_log(cli, dashboard_key, workspace, tmp_path):
    public_key = tmp_path / "id_ed25519.pub"
    public_key.write_text(ED25519 + "\n")
    assert cli("ssh-keys", "add", "laptop", str(public_key)).returncode == 0
    entry = AuditEvent.objects.get(workspace=workspace, action="ssh_key.add")
    assert (entry.surface, entry.actor, entry.actor_kind) == ("cli", dashboard_key[:16], "api_key")

    listed = cli("audit", "--action", "ssh_key", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert row["id"] == entry.pk and row["surface"] == "cli" and row["changes"]["name"] == [None, "laptop"]
    table = cli("audit", "--limit", "1")
    assert table.returncode == 0 and "ssh_key.add" in table.stdout and "More: runcrate audit --cursor" in table.stderr
    every = cli("audit", "--all", "--json")
    assert len(json.loads(every.stdout)) == AuditEvent.objects.filter(workspace=workspace).count()
    assert cli("audit", "--since", "someday").returncode == 2


def test_the_cli_is_refused_for_a_developer(cli, workspace, developer):
    from api.keys import create_api_key

    key = create_api_key(workspace=workspace, created_by=developer, name="dev")[1]
    result = cli("audit", api_key=key)
    assert result.returncode == 3 and "Owners and Managers" in result.stderr


async def test_the_mcp_server_records_its_actions_as_mcp_and_reads_the_log(live_server, dashboard_key, workspace):
    async with Client(stdio(live_server, dashboard_key)) as client:
        await call(client, "add_ssh_key", name="laptop", public_key=ED25519)
        found = await call(client, "audit_events", action="ssh_key.add")
        [event] = found["events"]
        assert event["surface"] == "mcp" and event["actor"] == dashboard_key[:16]
        assert found["next_cursor"] is None
        assert "cursor" in await refused(client, "audit_events", cursor="bogus")
