"""The MCP server driven through the SDK's own client: over stdio (a subprocess) and streamable HTTP."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
import uvicorn
from client_support import REPO_ROOT, runcrate_env
from fake_api import VALID_KEY, FakeApi
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from runcrate_client.api import ClientConfig
from runcrate_client.mcp_server import PlanSigner, http_app

TOOLS = {"list_gpu_types", "list_cluster_offers", "plan_cluster", "create_cluster", "cluster_status",
         "list_clusters", "delete_cluster", "billing_balance", "cluster_usage"}


def stdio_server(fake_api: FakeApi, environment: str | None = None) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
        env=runcrate_env(fake_api.url, VALID_KEY, environment), cwd=REPO_ROOT,
    )


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content[0].text
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return result.content[0].text


async def test_an_agent_plans_creates_follows_bills_and_deletes_over_stdio(fake_api: FakeApi) -> None:
    async with Client(stdio_server(fake_api)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        assert all(len(tool.description or "") > 60 for tool in tools.values())

        offers = await call(client, "list_cluster_offers", gpu="H100", machines=4)
        assert [o["id"] for o in offers["offers"]] == ["off_h100_ct", "off_h100_vm"]
        with_community = await call(client, "list_cluster_offers", gpu="H100", machines=4, include_community=True)
        assert "warning" in with_community

        args = {"offer_id": "off_h100_vm", "machines": 4, "name": "train", "software": "slurm"}
        plan = await call(client, "plan_cluster", **args)
        assert plan["can_create"] is True
        assert plan["plan"]["price_per_hour"] == "78.40"
        assert plan["balance"]["required_to_start"] == "78.40"
        assert "not exposed" in plan["balance"]["monthly_budget"]

        # Without a token, with a made-up one, or for other arguments: refused, nothing created.
        assert "plan_cluster" in await refused(client, "create_cluster", **args, confirmation_token="yes please")
        assert "machines (planned 4, asked 8)" in await refused(
            client, "create_cluster", **{**args, "machines": 8}, confirmation_token=plan["confirmation_token"])
        assert fake_api.state.clusters == {}

        created = await call(client, "create_cluster", **args, confirmation_token=plan["confirmation_token"])
        cluster_id = created["cluster"]["id"]
        again = await call(client, "create_cluster", **args, confirmation_token=plan["confirmation_token"])
        assert again["cluster"]["id"] == cluster_id
        assert len(fake_api.state.clusters) == 1

        for _ in range(6):
            status = await call(client, "cluster_status", cluster_id=cluster_id)
            if status["cluster"]["status"] == "ready":
                break
        assert status["cluster"]["status"] == "ready"
        assert [n["private_ip"] for n in status["cluster"]["nodes"]] == [f"10.77.0.{i}" for i in range(1, 5)]
        assert status["recent_events"][-1]["event"] == "ready"

        listed = await call(client, "list_clusters")
        assert listed["clusters"][0]["id"] == cluster_id
        balance = await call(client, "billing_balance")
        assert balance["balance"]["active_usage_cost_per_hour"] == "78.40"
        usage = await call(client, "cluster_usage", cluster_id=cluster_id)
        assert usage["usage"][0]["description"] == "Cluster usage train"
        assert len(usage["usage"][0]["rows"]) == 4

        deleted = await call(client, "delete_cluster", cluster_id=cluster_id)
        assert "terminating" in deleted["result"]
        assert "404" in await refused(client, "cluster_status", cluster_id="cl_missing")


async def test_plan_refuses_a_token_when_the_balance_does_not_cover_an_hour(fake_api: FakeApi) -> None:
    fake_api.state.balance = Decimal("8.00")
    async with Client(stdio_server(fake_api)) as client:
        plan = await call(client, "plan_cluster", offer_id="off_h100_ct", machines=2, name="small")
        assert plan["can_create"] is False
        assert "confirmation_token" not in plan
        assert plan["balance"]["required_to_start"] == "10.00"  # one hour is $4.90: the $10 floor applies
        assert "insufficient credits" in plan["problems"][0]


async def test_plan_checks_software_community_volumes_and_the_budget(fake_api: FakeApi) -> None:
    fake_api.state.monthly_budget_remaining = "20.00"
    async with Client(stdio_server(fake_api, environment="staging")) as client:
        k8s_on_containers = await call(client, "plan_cluster", offer_id="off_h100_ct", machines=2, name="k",
                                       software="kubernetes")
        assert any("kubernetes" in p.lower() for p in k8s_on_containers["problems"])
        community = await call(client, "plan_cluster", offer_id="off_h100_comm", machines=2, name="c",
                               volume_id="vol_1")
        assert any("volume" in p for p in community["problems"])
        assert community["warnings"]
        over_budget = await call(client, "plan_cluster", offer_id="off_h100_vm", machines=2, name="b")
        assert any("monthly budget" in p for p in over_budget["problems"])
        assert "not issued" in await refused(client, "create_cluster", offer_id="off_h100_vm", machines=2, name="b",
                                              confirmation_token="rcplan1.e30.bad")
        assert "cannot start" in await refused(client, "plan_cluster", offer_id="off_h100_ct", machines=30, name="x")
    assert all(r["headers"].get("X-Environment") == "staging" for r in fake_api.state.requests)


# -- streamable HTTP --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mcp_http(fake_api: FakeApi, config_file) -> Iterator[str]:
    config = ClientConfig.resolve(VALID_KEY, fake_api.url)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(http_app(config, PlanSigner(b"k" * 32)), host="127.0.0.1", port=port,
                                           log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}/mcp"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.mark.parametrize("authorization", [None, "Bearer rc_live_someone_else", f"Basic {VALID_KEY}"])
def test_http_transport_rejects_other_keys_with_401(mcp_http: str, authorization: str | None) -> None:
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    if authorization:
        headers["Authorization"] = authorization
    response = httpx.post(mcp_http, headers=headers, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


async def test_http_transport_serves_the_tools_with_the_same_key(mcp_http: str, fake_api: FakeApi) -> None:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {VALID_KEY}"})
    async with http, Client(streamable_http_client(mcp_http, http_client=http)) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        balance = await call(client, "billing_balance")
        assert balance["balance"]["credits_balance"] == "500.00"
    assert fake_api.state.requests[-1]["headers"]["Authorization"] == f"Bearer {VALID_KEY}"
