from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer

from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client = tools.client

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_gpu_types() -> dict[str, Any]:
        """List the GPU models clusters can be built from. Use the `name` as the `gpu` argument of
        list_cluster_offers."""
        return {"gpu_types": client.catalogue.list_gpu_types().items}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def list_cluster_offers(gpu: str | None = None, machines: int | None = None, include_community: bool = False) -> dict[str, Any]:
        """List offers that can start a cluster NOW for `machines` machines of GPU model `gpu` (e.g. "H100").

        Each offer has an `id` (pass it to plan_cluster), `price_per_cluster_hour` (whole cluster, what
        gets billed) and `price_per_machine_hour`, the `software` it supports (none, slurm, kubernetes,
        ray), the machine `images` it can start (name, os, python, pytorch, cuda; pass a name as `image`
        to plan_cluster, or leave it out for `default_image`), location, interconnect and machine kind.
        Prices are per machine, never per GPU.
        Community offers (independent operators' hosts) are left out unless include_community is true;
        only use them if the user accepts that secrets must stay off them, and no volume can be attached.
        """
        items = client.catalogue.list_cluster_offers(gpu=gpu, machines=machines, include_community=include_community).items
        result: dict[str, Any] = {"offers": items, "count": len(items)}
        warnings = sorted({o["warning"] for o in items if o.get("warning")})
        if warnings:
            result["warning"] = " ".join(warnings)
        if not items:
            result["hint"] = "Nothing can start now for that size: try fewer machines or another GPU."
        return result
