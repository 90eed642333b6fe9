from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client = tools.client

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_instances() -> dict[str, Any]:
        """Every machine the workspace runs (in this server's environment when RUNCRATE_ENVIRONMENT is set,
        else in every environment), each with the cluster it belongs to
        (cluster_id, cluster_name), its GPU, status, health, ssh line, private IP and hourly price."""
        items = client.instances.list_all()
        return {"instances": items, "count": len(items)}

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def terminate_instance(instance_id: str) -> dict[str, Any]:
        """Ask to stop one machine. Always refused: a cluster's machines stop together; the answer names
        the cluster, which delete_cluster terminates (only if the user asked for that)."""
        client.instances.terminate(instance_id)
        return {"instance": None}
