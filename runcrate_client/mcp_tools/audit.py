"""The audit log tool: who did what in the workspace (Owners and Managers)."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client = tools.client

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def audit_events(actor: str | None = None, action: str | None = None, object: str | None = None,
                     since: str | None = None, until: str | None = None, limit: int = 50,
                     cursor: str | None = None) -> dict[str, Any]:
        """The workspace's audit log, newest first: who acted (actor: a username, an API key prefix rc_live_…, or
        Runcrate itself), from where (surface: page, api, cli, mcp), the action (e.g. cluster.terminate,
        member.role_change, account.sign_in_failed), the object and `changes` as {field: [before, after]}.
        Filters: actor, action (an action, or a kind such as "cluster" for all its actions), object ("cluster" or
        "cluster:12"), since/until (ISO 8601). Pass next_cursor back as cursor for older entries.
        Owners and Managers only (403 otherwise)."""
        page = client.audit_log.list_events(actor=actor, action=action, object=object, since=since, until=until,
                                            limit=limit, cursor=cursor)
        return {"events": page.items, "next_cursor": page.meta.get("next_cursor")}
