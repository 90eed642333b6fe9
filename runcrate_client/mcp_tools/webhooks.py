"""Webhook tools: endpoints that get signed lifecycle events, their delivery log, test and re-send."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors

WRITE = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client = tools.client

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_webhooks() -> dict[str, Any]:
        """The workspace's webhook endpoints (url, events, is_active). Owners and Managers only (403 otherwise)."""
        return {"webhooks": client.webhooks.list_endpoints_all()}

    @mcp.tool(annotations=WRITE)
    @api_errors_as_tool_errors
    def add_webhook(url: str, events: list[str], description: str = "") -> dict[str, Any]:
        """Add an endpoint that gets signed JSON events. events: any of cluster.created, cluster.ready,
        cluster.failed, cluster.degraded, cluster.terminated, cluster.idle, node.unhealthy, node.recovered,
        network_test.finished, balance.low, budget.reached. The answer's `secret` verifies
        Runcrate-Signature (t=…,v1=HMAC-SHA256 of "t.body"). URLs must be https:// on a public address."""
        return {"webhook": client.webhooks.create_endpoint(url=url, events=events, description=description)}

    @mcp.tool(annotations=WRITE)
    @api_errors_as_tool_errors
    def test_webhook(endpoint_id: str) -> dict[str, Any]:
        """Send a webhook.test event to the endpoint; read the outcome with webhook_deliveries."""
        return {"delivery": client.webhooks.test_endpoint(endpoint_id)}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def webhook_deliveries(endpoint_id: str, limit: int = 20) -> dict[str, Any]:
        """The endpoint's delivery log, newest first: event type and id, status (pending while retrying,
        succeeded, failed after 3 days), attempts, last HTTP status, response time, next try, attempt_log."""
        return {"deliveries": client.webhooks.list_deliveries(endpoint_id, limit=limit).items}

    @mcp.tool(annotations=WRITE)
    @api_errors_as_tool_errors
    def resend_webhook_delivery(endpoint_id: str, delivery_id: str) -> dict[str, Any]:
        """Send a delivery's event again (the same event id, so the receiver can drop a duplicate)."""
        return {"delivery": client.webhooks.resend_delivery(endpoint_id, delivery_id)}

    @mcp.tool(annotations=WRITE)
    @api_errors_as_tool_errors
    def update_webhook(endpoint_id: int | str, events: list[str] | None = None,
                       is_active: bool | None = None) -> dict[str, Any]:
        """Change an endpoint's events, or pause (is_active=false) and resume it."""
        return {"webhook": client.webhooks.update_endpoint(endpoint_id, events=events, is_active=is_active)}

    @mcp.tool(annotations=WRITE)
    @api_errors_as_tool_errors
    def rotate_webhook_secret(endpoint_id: int | str) -> dict[str, Any]:
        """Make a new signing secret for an endpoint; the old one stops verifying. The answer carries it."""
        return {"webhook": client.webhooks.rotate_secret(endpoint_id)}

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def delete_webhook(endpoint_id: int | str) -> dict[str, Any]:
        """Remove an endpoint and its delivery log (only when the user asked)."""
        return {"deleted": client.webhooks.delete_endpoint(endpoint_id)}
