from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client = tools.client

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def billing_balance() -> dict[str, Any]:
        """The workspace's credit balance, what its running clusters cost per hour, the hours that
        balance lasts and the environment's budget. When credits run out, running clusters are terminated."""
        return {"balance": client.billing.get_balance()}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def cluster_usage(month: str | None = None, cluster_id: str | None = None) -> dict[str, Any]:
        """What clusters cost in a month (`month` as YYYY-MM; default: this month): one line per cluster,
        "Cluster usage <name>" with its `amount`, `machines` and whether it is still `accruing`. Pass
        cluster_id (an id or a name) to open that cluster's line to a row per machine (node, gpu, start,
        end, hours, rate, amount); its amount is the sum of those rows."""
        if cluster_id:
            line = client.billing.get_usage_line(client.find_cluster_id(str(cluster_id)), month=month)
            return {"usage": [line], "total": str(line.get("amount") or "0"), "month": month or "current"}
        usage = client.usage(month)
        return {"usage": usage.items, "total": usage.meta.get("total_amount"), "month": month or "current"}
