"""The MCP server as a subprocess over stdio, driven by the SDK's client, against the live API."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from tests.client.client_support import REPO_ROOT, runcrate_env

pytestmark = pytest.mark.django_db(transaction=True)


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return result.content[0].text


async def test_an_agent_lists_plans_creates_follows_and_deletes_a_cluster(live_server, dashboard_key, instant_offer):
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
        env=runcrate_env(live_server.url, dashboard_key), cwd=REPO_ROOT,
    )
    async with Client(server) as client:
        offers = await call(client, "list_cluster_offers", gpu="H100", machines=2)
        [offer] = offers["offers"]
        assert offer["id"] == instant_offer.pk

        args = {"offer_id": str(offer["id"]), "machines": 2, "name": "agent", "software": "ray"}
        plan = await call(client, "plan_cluster", **args)
        assert plan["can_create"] is True, plan["problems"]
        assert plan["plan"]["price_per_hour"] == "5.00"
        assert plan["balance"]["required_to_start"] == "10.00"  # one hour is $5: the $10 floor applies
        assert "left this month" in plan["balance"]["monthly_budget"]

        assert "plan_cluster" in await refused(client, "create_cluster", **args, confirmation_token="trust me")
        created = await call(client, "create_cluster", **args, confirmation_token=plan["confirmation_token"])
        cluster_id = created["cluster"]["id"]
        again = await call(client, "create_cluster", **args, confirmation_token=plan["confirmation_token"])
        assert again["cluster"]["id"] == cluster_id

        status = await call(client, "cluster_status", cluster_id=str(cluster_id))
        assert status["cluster"]["status"] == "ready"
        assert [n["private_ip"] for n in status["cluster"]["nodes"]] == ["10.77.0.1", "10.77.0.2"]
        assert status["recent_events"][-1]["event"] == "ready"

        listed = await call(client, "list_clusters")
        assert [c["id"] for c in listed["clusters"]] == [cluster_id]
        balance = await call(client, "billing_balance")
        assert balance["balance"]["active_usage_cost_per_hour"] == "5.00"
        usage = await call(client, "cluster_usage", cluster_id=str(cluster_id))
        assert usage["usage"][0]["description"] == "Cluster usage agent"

        deleted = await call(client, "delete_cluster", cluster_id=str(cluster_id))
        assert deleted["cluster"]["status"] in ("terminating", "terminated")
        final = await call(client, "cluster_status", cluster_id=str(cluster_id))
        assert final["cluster"]["status"] == "terminated"
        assert "404" in await refused(client, "cluster_status", cluster_id="999999")
