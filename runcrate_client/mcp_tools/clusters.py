from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from runcrate_client.mcp_server import READ_ONLY, ToolContext, api_errors_as_tool_errors

HINTS = {
    "provisioning": "Machines are booting and joining the private network; poll again in ~15 s.",
    "installing": "Software is installing on every node; poll again in ~15 s.",
    "ready": "Every node is ready. It is billed until delete_cluster.",
    "degraded": "The software failed to install; machines are up and billed. Retry the install "
                "(CLI: runcrate clusters retry-install) or delete_cluster.",
    "failed": "Not every machine came up; all were released and nothing was billed.",
    "terminated": "Stopped; billing has ended.",
}


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client = tools.client

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def cluster_status(cluster_id: str) -> dict[str, Any]:
        """Status of one cluster: its nodes (name, role, status, private_ip, health: healthy / unreachable /
        network_down / software_down with health_detail), unhealthy_nodes, price, billing start and
        its latest events. Statuses: provisioning -> installing -> ready; `failed` (never billed, machines
        released), `degraded` (software failed; still billed: delete_cluster, or ask the user to retry the
        install), `terminated`."""
        cluster = client.clusters.get(cluster_id)
        events = client.clusters.list_events_all(cluster_id)
        events.sort(key=lambda e: str(e.get("created_at") or ""))
        return {"cluster": cluster, "recent_events": events[-10:], "hint": HINTS.get(str(cluster.get("status")), "")}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_clusters() -> dict[str, Any]:
        """List the clusters in this environment (id, name, status, price_per_hour, machines). Use
        cluster_status for a cluster's nodes and events."""
        keep = ("id", "name", "status", "machines", "software", "price_per_hour", "billing_started_at",
                "termination_reason", "created_at")
        items = [{k: c.get(k) for k in keep if k in c} for c in client.clusters.list_all()]
        return {"clusters": items, "count": len(items)}

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def delete_cluster(cluster_id: str) -> dict[str, Any]:
        """Terminate a whole cluster: every machine stops, their local disks are lost, billing ends.
        Irreversible: only call it when the user asked to stop the cluster (or to stop spending).
        Single nodes cannot be terminated on their own."""
        result = client.clusters.terminate(cluster_id)
        return {"cluster": result, "result": f"Cluster {cluster_id} is terminating; billing stops for every machine."}
