from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from runcrate_client.api import format_money
from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors, scope_of

# What an add-workers token is issued for; a create or replace token never matches these.
WORKER_FIELDS = ("action", "cluster_id", "count")
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=True)

HINTS = {
    "provisioning": "Machines are booting and joining the private network; poll again in ~15 s.",
    "installing": "Software is installing on every node; poll again in ~15 s.",
    "ready": "Every node is ready. It is billed until delete_cluster.",
    "degraded": "The software failed to install; machines are up and billed. Ask the user whether to "
                "retry_install or delete_cluster.",
    "failed": "Not every machine came up; all were released and nothing was billed.",
    "terminated": "Stopped; billing has ended.",
}


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client, signer = tools.client, tools.signer

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
        """List the clusters in this environment (id, name, status, price_per_hour, machines, image). Use
        cluster_status for a cluster's nodes and events."""
        keep = ("id", "name", "status", "machines", "software", "image", "price_per_hour", "billing_started_at",
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

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def cluster_events(cluster_id: str) -> dict[str, Any]:
        """Everything that happened to a cluster, oldest first: created, each node booted/joined/installed,
        ready, workers added, replacements, health changes, terminated (with who did it)."""
        events = client.clusters.list_events_all(cluster_id)
        return {"events": events, "count": len(events)}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def retry_install(cluster_id: str) -> dict[str, Any]:
        """Install the software again on a `degraded` cluster (its machines are up and billed meanwhile).
        Only when the user asked; then poll cluster_status until `ready` or `degraded` again."""
        cluster = client.clusters.retry_install(cluster_id)
        return {"cluster": cluster, "next_step": f"Poll cluster_status with cluster_id={cluster_id} every ~15 s."}

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def sync_volume(cluster_id: str) -> dict[str, Any]:
        """Save a running cluster's volume folder (/shared/volume on node-0; /volume on container offers) to
        its attached volume now: a checkpoint, copied while jobs keep running. A folder larger than the volume
        is refused whole (the volume keeps its earlier data). Then read cluster_events for volume_synced (bytes
        and seconds) or volume_sync_failed (why)."""
        cluster = client.clusters.sync_volume(cluster_id)
        return {"cluster": cluster, "next_step": f"Poll cluster_events with cluster_id={cluster_id} until a "
                                                  "volume_synced or volume_sync_failed event appears."}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def plan_add_workers(cluster_id: str, count: int = 1) -> dict[str, Any]:
        """What adding `count` worker machines to a ready cluster costs; REQUIRED before add_workers.
        Changes nothing. Each new worker is a machine of the cluster's offer, billed from when it is up."""
        cluster = client.clusters.get(cluster_id)
        per_machine = cluster.get("price_per_machine_hour")
        # Priced as the server states it (per machine); no money is added up on this side.
        result: dict[str, Any] = {
            "summary": (f"Add {count} worker(s) to {cluster.get('name')} at {format_money(per_machine)}/h each, on top of "
                        f"its {format_money(cluster.get('price_per_hour'))}/h; each is billed from when it is up. The "
                        "server checks the rest (ready cluster, free machines now, the balance)."),
            "price_per_worker_hour": per_machine,
            "workers": count,
        }
        plan = {"action": "add_workers", "cluster_id": str(cluster_id), "count": int(count)}
        signer.offer(result, plan, str(per_machine), scope_of(cluster), fields=WORKER_FIELDS, next_step=(
            "Tell the user the price per worker and hour, then call add_workers with the same cluster_id, count and "
            "this confirmation_token."))
        return result

    @mcp.tool(annotations=CHANGES)
    @api_errors_as_tool_errors
    def add_workers(cluster_id: str, confirmation_token: str, count: int = 1) -> dict[str, Any]:
        """Add worker machines to a ready cluster (spends money). Needs the confirmation_token that
        plan_add_workers issued for exactly this cluster and count. Then poll cluster_status."""
        request = {"action": "add_workers", "cluster_id": str(cluster_id), "count": int(count)}
        payload = signer.verify(confirmation_token, request, scope_of(client.clusters.get(cluster_id)),
                                fields=WORKER_FIELDS)
        nonce = payload["nonce"]
        if nonce in signer.spent:
            return {"cluster": client.clusters.get(cluster_id),
                    "note": "This token was already used; this is the cluster as it is now."}
        cluster = client.clusters.add_workers(cluster_id, count=count)
        signer.spent[nonce] = str(cluster_id)
        return {"cluster": cluster,
                "next_step": f"Poll cluster_status with cluster_id={cluster_id} every ~15 s until every node is ready."}
