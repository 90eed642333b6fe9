"""The MCP server's tools, one module per group; each has `register(server, tools)`."""

from __future__ import annotations

from runcrate_client.mcp_tools import account, billing, catalogue, clusters, instances, plan

TOOL_MODULES = (catalogue, plan, clusters, instances, account, billing)
