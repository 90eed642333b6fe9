"""The MCP server's tools, one module per group; each has `register(server, tools)`."""

from __future__ import annotations

from runcrate_client.mcp_tools import (
    account,
    audit,
    billing,
    catalogue,
    clusters,
    instances,
    network,
    plan,
    replace,
    webhooks,
    workspace,
)

TOOL_MODULES = (catalogue, plan, clusters, network, replace, instances, account, workspace, billing, webhooks, audit)
