from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client = tools.client

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_ssh_keys() -> dict[str, Any]:
        """The workspace's SSH public keys (id, name, fingerprint). plan_cluster/create_cluster
        install every one of them unless `ssh_key_ids` names some: each lets the user SSH into
        every node as root."""
        items = client.account.list_ssh_keys_all()
        return {"ssh_keys": items, "count": len(items)}

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def add_ssh_key(name: str, public_key: str) -> dict[str, Any]:
        """Add an OpenSSH public key (one line: type, key, optional comment — e.g. the contents of
        ~/.ssh/id_ed25519.pub) to the workspace. Never pass a private key."""
        return {"ssh_key": client.account.create_ssh_key(name=name, public_key=public_key)}

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def delete_ssh_key(key_id: str) -> dict[str, Any]:
        """Remove an SSH key from the workspace. Running clusters keep it; new clusters no longer get it."""
        return {"ssh_key": client.account.delete_ssh_key(key_id)}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_environments() -> dict[str, Any]:
        """The workspace's environments with each monthly budget, month-to-date spend and what is left;
        `current` marks the one this server acts in (RUNCRATE_ENVIRONMENT)."""
        return {"environments": client.account.list_environments_all()}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_workspaces() -> dict[str, Any]:
        """The workspaces the key's creator belongs to, with their role; `current` marks this server's
        (the key's own: a key acts only in the workspace it was made in; to act in another, use a key made there)."""
        return {"workspaces": client.account.list_workspaces_all()}
