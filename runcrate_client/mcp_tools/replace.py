"""plan_replace_node -> replace_node: swapping a machine in bills one machine more while the two
overlap, so, as with clusters, the agent shows the user what it costs before it acts."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from runcrate_client.api import format_money
from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors, scope_of

# What a replace token is issued for; a create token (PLAN_FIELDS) never matches these.
REPLACE_FIELDS = ("action", "cluster_id", "node_name")


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client, signer = tools.client, tools.signer

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def plan_replace_node(cluster_id: str, node_name: str) -> dict[str, Any]:
        """What replacing one node of a ready cluster would do and cost; REQUIRED before replace_node.
        Changes nothing. Use it for a node whose health is not `healthy` (or when the user asks).

        A new machine of the same offer boots, takes the node's name and private address, joins the
        private network and the software; only then does the old machine stop (its local disk is lost).
        While both run, one machine more is billed. node-0 (the head) cannot be replaced. The server
        checks the rest when replace_node is called (ready cluster, a free machine now, the balance)."""
        cluster = client.clusters.get(cluster_id)
        nodes = [n for n in cluster.get("nodes") or [] if n.get("name") == node_name and n.get("status") != "stopped"]
        per_machine = cluster.get("price_per_machine_hour")
        problems = []
        if not nodes:
            problems.append(f"node_not_found: {cluster.get('name')} has no node {node_name}")
        if node_name == "node-0":
            problems.append("head_replace_refused: node-0 is the head (controller and /shared); only workers")
        if cluster.get("status") != "ready":
            problems.append(f"not_ready: the cluster is {cluster.get('status')}; only a ready cluster replaces a node")
        if any(n.get("replacing") for n in cluster.get("nodes") or []):
            problems.append("replacement_in_progress: a node of this cluster is being replaced already")
        result: dict[str, Any] = {
            "can_replace": not problems,
            "problems": problems,
            "summary": (f"Replace {node_name} of {cluster.get('name')}: a new machine of the same offer takes its name "
                        f"and private address, then the old one stops. While both run the cluster costs "
                        f"{format_money(per_machine)}/h more than its {format_money(cluster.get('price_per_hour'))}/h; "
                        "the new machine is billed from when it is up, the old one until it stops. Files on the old "
                        "machine's own disk are lost (/shared on the head stays)."),
            "extra_per_hour_while_swapping": per_machine,
        }
        if not problems:
            plan = {"action": "replace_node", "cluster_id": str(cluster_id), "node_name": node_name}
            signer.offer(result, plan, str(per_machine), scope_of(cluster), fields=REPLACE_FIELDS, next_step=(
                "Tell the user what it costs and that the old machine's disk is lost, then call "
                "replace_node with the same cluster_id, node_name and this confirmation_token."))
        return result

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def replace_node(cluster_id: str, node_name: str, confirmation_token: str) -> dict[str, Any]:
        """Replace a node with a new machine (spends money: one machine more while they overlap). Needs
        the confirmation_token plan_replace_node issued for exactly this cluster and node. If no machine
        of the offer can start now the server says so (offer_unavailable) and nothing else is tried.
        Then poll cluster_status: the node marked `replacing` is the new machine; the swap is done when
        no node is `replacing` and an event `node_replaced` (or `replacement_failed`) appears."""
        request = {"action": "replace_node", "cluster_id": str(cluster_id), "node_name": node_name}
        payload = signer.verify(confirmation_token, request, scope_of(client.clusters.get(cluster_id)),
                                fields=REPLACE_FIELDS)
        nonce = payload["nonce"]
        if nonce in signer.spent:
            return {"cluster": client.clusters.get(cluster_id),
                    "note": "This token was already used; this is the cluster as it is now."}
        cluster = client.clusters.replace_node(cluster_id, node_name)
        signer.spent[nonce] = str(cluster_id)
        return {
            "cluster": cluster,
            "next_step": f"Poll cluster_status with cluster_id={cluster_id} every ~15 s until no node is 'replacing'; "
                         f"the events say node_replaced (done) or replacement_failed (the old {node_name} keeps running).",
        }
