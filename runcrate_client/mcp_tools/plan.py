"""plan_cluster -> create_cluster: the server plans (every money and product rule lives there);
this side only signs what the server said, so an agent cannot spend without the user seeing the price."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from runcrate_client.api import format_money
from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors, normalize, scope_of


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client, signer = tools.client, tools.signer

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def plan_cluster(
        offer_id: int | str, machines: int, name: str, software: str = "none", image: str | None = None,
        volume_id: int | str | None = None, ssh_key_ids: list[int | str] | None = None,
    ) -> dict[str, Any]:
        """Price a cluster before creating it; REQUIRED before create_cluster. Creates nothing, costs nothing.

        The server runs exactly the checks a create would (machine count, offer free now, software on
        this machine kind, the machine image, volume, the balance rule, the environment's budget) and
        answers the image the nodes would boot (`image`: the one named, or the offer's default, pytorch
        where offered; `images` lists what the offer can start, with OS, Python, PyTorch and CUDA), the
        price per hour, the runway of everything the workspace runs once this cluster runs too, warnings, and every
        refusal in `problems`. When it can be created you get a `confirmation_token` valid for a few
        minutes: show the user the price, then call create_cluster with exactly the same arguments and
        that token. If `can_create` is false, read `problems` and do not call create_cluster.
        """
        plan = {"offer_id": offer_id, "machines": machines, "software": normalize("software", software),
                "image": normalize("image", image), "name": name, "volume_id": volume_id,
                "ssh_key_ids": ssh_key_ids or []}
        server_plan = client.clusters.plan(name=name, offer_id=offer_id, machines=machines, software=plan["software"],
                                          image=plan["image"], volume_id=volume_id, ssh_key_ids=ssh_key_ids or None)
        offer = server_plan.get("offer") or {}
        per_hour = server_plan.get("price_per_hour")
        result: dict[str, Any] = {
            "can_create": bool(server_plan.get("can_create")),
            "plan": server_plan,
            "problems": [f"{p['code']}: {p['message']}" for p in server_plan.get("problems") or []],
            "warnings": server_plan.get("warnings") or [],
            "summary": (f"{name}: {machines} x {offer.get('gpus_per_machine')}x {offer.get('gpu')} "
                        f"({offer.get('machine_kind')}, {offer.get('location')}), software {plan['software']}, "
                        f"image {server_plan.get('image') or 'none (the machines run their own system)'}, "
                        f"{format_money(per_hour)}/h for the whole cluster "
                        f"({format_money(server_plan.get('price_per_machine_hour'))}/h per machine), billed from the "
                        "moment every machine has joined until deleted."),
        }
        if result["can_create"]:
            signer.offer(result, plan, str(per_hour), scope_of(server_plan), next_step=(
                "Tell the user the price, then call create_cluster with the same offer_id, machines, software, "
                "image, name (and volume_id/ssh_key_ids) and this confirmation_token."))
        return result

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def create_cluster(
        offer_id: int | str, machines: int, name: str, confirmation_token: str, software: str = "none",
        image: str | None = None, volume_id: int | str | None = None, ssh_key_ids: list[int | str] | None = None,
    ) -> dict[str, Any]:
        """Create (and start paying for) a cluster that plan_cluster priced. Spends money.

        Needs the `confirmation_token` from plan_cluster, issued for exactly these arguments and not
        expired; otherwise it refuses and you must call plan_cluster again. Re-calling with the same
        token returns the same cluster instead of creating another. The cluster starts `provisioning`;
        poll cluster_status until `ready` (or `failed`/`degraded`). It is billed until delete_cluster.
        """
        request = {"offer_id": offer_id, "machines": machines, "software": software, "image": image, "name": name,
                   "volume_id": volume_id, "ssh_key_ids": ssh_key_ids or []}
        # The server plans again: the token must have been planned in the workspace and environment
        # it answers now, and the price the user agreed to must still hold.
        replan = client.clusters.plan(name=name, offer_id=offer_id, machines=machines, software=normalize("software", software),
                                     image=normalize("image", image), volume_id=volume_id,
                                     ssh_key_ids=ssh_key_ids or None)
        payload = signer.verify(confirmation_token, request, scope_of(replan))
        nonce = payload["nonce"]
        if nonce in signer.spent:
            return {"cluster": client.clusters.get(signer.spent[nonce]),
                    "note": "This token was already used; this is the cluster it created."}
        current = replan.get("price_per_hour")
        if current is not None and Decimal(str(current)) > Decimal(payload["price_per_hour"]):
            raise ToolError(f"the price rose from {format_money(payload['price_per_hour'])}/h to {format_money(current)}/h "
                            "since the plan: call plan_cluster again and confirm the new price with the user")
        cluster = client.clusters.create(
            name=name, offer_id=offer_id, machines=machines, software=normalize("software", software),
            image=normalize("image", image), volume_id=volume_id, ssh_key_ids=ssh_key_ids or None, idempotency_key=nonce,
        )
        signer.spent[nonce] = str(cluster.get("id"))
        return {
            "cluster": cluster,
            "next_step": f"Poll cluster_status with cluster_id={cluster.get('id')} every ~15 s until status is "
                         "'ready' (or 'failed'/'degraded'). Billing starts when every machine has joined.",
        }
