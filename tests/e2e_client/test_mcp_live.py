"""The MCP server as a subprocess over stdio, driven by the SDK's client, against the live API."""

from __future__ import annotations

import socket
import sys
import threading
import time
from decimal import Decimal
from typing import Any

import httpx
import pytest
import uvicorn
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.types import CallToolResult, TextContent

from accounts.models import Workspace
from runcrate_client.api import ClientConfig
from runcrate_client.mcp_common import PlanSigner
from runcrate_client.mcp_server import http_app
from tests.client.client_support import REPO_ROOT, runcrate_env
from tests.factories import machine_type_with_hosts

pytestmark = pytest.mark.django_db(transaction=True)

TOOLS = {"list_gpu_types", "list_cluster_offers", "plan_cluster", "create_cluster", "cluster_status",
         "list_clusters", "delete_cluster", "billing_balance", "cluster_usage", "list_instances",
         "terminate_instance", "list_ssh_keys", "add_ssh_key", "delete_ssh_key", "list_environments",
         "list_workspaces", "start_network_test", "network_test_results", "plan_replace_node", "replace_node",
         "list_webhooks", "add_webhook", "test_webhook", "webhook_deliveries", "resend_webhook_delivery", "cluster_metrics",
         "update_webhook", "rotate_webhook_secret", "delete_webhook", "cluster_events", "retry_install",
         "plan_add_workers", "add_workers", "list_members", "change_member_role", "remove_member", "list_invitations",
         "invite_member", "revoke_invitation", "list_api_keys", "create_api_key", "set_api_key_active",
         "delete_api_key", "create_environment", "set_environment_budget", "set_idle_notice", "list_volumes",
         "create_volume", "delete_volume", "sync_volume", "request_quote", "audit_events", "list_quotas", "set_quota",
         "delete_quota"}
ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl laptop"


def stdio(live_server, key: str, environment: str | None = None) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
                                 env=runcrate_env(live_server.url, key, environment), cwd=REPO_ROOT)


def first_text(result: CallToolResult) -> str:
    content = result.content[0]
    assert isinstance(content, TextContent), content
    return content.text


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, first_text(result)
    assert result.structured_content is not None
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error
    return first_text(result)


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
        assert plan["plan"]["balance"]["required"] == "10.00"  # one hour is $5: the $10 floor applies
        assert plan["plan"]["budget"]["remaining"] == "5000.00"

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
        assert [row["node"] for row in usage["usage"][0]["rows"]] == ["node-0", "node-1"]
        assert usage["total"] == usage["usage"][0]["amount"]
        lines = await call(client, "cluster_usage")
        assert [(line["cluster_id"], line["machines"], line["rows"]) for line in lines["usage"]] == [(cluster_id, 2, None)]

        deleted = await call(client, "delete_cluster", cluster_id=str(cluster_id))
        assert deleted["cluster"]["status"] in ("terminating", "terminated")
        final = await call(client, "cluster_status", cluster_id=str(cluster_id))
        assert final["cluster"]["status"] == "terminated"
        assert "404" in await refused(client, "cluster_status", cluster_id="999999")


@pytest.fixture
def community_container_and_little_money(workspace):
    Workspace.objects.filter(pk=workspace.pk).update(credit_balance=Decimal("8.00"))
    return machine_type_with_hosts(2, kind="container", community=True)


async def test_the_plan_is_the_servers_and_refusals_issue_no_token(live_server, dashboard_key,
                                                                   community_container_and_little_money):
    container = community_container_and_little_money
    async with Client(stdio(live_server, dashboard_key)) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert set(tools) == TOOLS
        assert all(len(tool.description or "") > 60 for tool in tools.values())
        plan = await call(client, "plan_cluster", offer_id=str(container.pk), machines=2, name="k",
                          software="kubernetes")
        assert plan["can_create"] is False and "confirmation_token" not in plan
        codes = {p.split(":")[0] for p in plan["problems"]}
        assert codes == {"kubernetes_unsupported", "insufficient_credits"}
        assert any("Community host" in w for w in plan["warnings"])
        assert "not issued" in await refused(client, "create_cluster", offer_id=str(container.pk), machines=2,
                                              name="k", confirmation_token="rcplan1.e30.bad")


async def test_an_agent_adds_an_ssh_key_sees_instances_and_cannot_stop_one(live_server, dashboard_key, instant_offer):
    async with Client(stdio(live_server, dashboard_key)) as client:
        key = (await call(client, "add_ssh_key", name="laptop", public_key=ED25519))["ssh_key"]
        assert [k["id"] for k in (await call(client, "list_ssh_keys"))["ssh_keys"]] == [key["id"]]
        args = {"offer_id": str(instant_offer.pk), "machines": 2, "name": "keyed", "ssh_key_ids": [str(key["id"])]}
        plan = await call(client, "plan_cluster", **args)
        created = await call(client, "create_cluster", **args, confirmation_token=plan["confirmation_token"])
        instances = (await call(client, "list_instances"))["instances"]
        assert {i["cluster_id"] for i in instances} == {created["cluster"]["id"]}
        refusal = await refused(client, "terminate_instance", instance_id=str(instances[0]["id"]))
        assert "node_terminate_refused" in refusal and "'keyed'" in refusal
        environments = (await call(client, "list_environments"))["environments"]
        assert [e["name"] for e in environments if e["current"]] == ["default"]
        assert (await call(client, "list_workspaces"))["workspaces"][0]["current"] is True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def mcp_http(live_server, dashboard_key):
    config = ClientConfig.resolve(dashboard_key, live_server.url)
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


async def test_the_http_transport_wants_the_same_key_and_serves_the_tools(mcp_http, dashboard_key):
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for authorization in (None, "Bearer rc_live_someone_else", f"Basic {dashboard_key}"):
        sent = {**headers, **({"Authorization": authorization} if authorization else {})}
        async with httpx.AsyncClient() as plain:
            response = await plain.post(mcp_http, headers=sent, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthenticated"
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {dashboard_key}"})
    async with http, Client(streamable_http_client(mcp_http, http_client=http)) as client:
        assert {tool.name for tool in (await client.list_tools()).tools} == TOOLS
        assert (await call(client, "billing_balance"))["balance"]["credits_balance"] == "1000.00"


async def test_a_token_planned_in_one_workspace_never_creates_in_another_with_a_shared_secret(
        live_server, dashboard_key, instant_offer):
    from asgiref.sync import sync_to_async

    from accounts.models import Role
    from api.keys import create_api_key
    from clusters.models import Cluster
    from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory

    def other_workspace_key() -> str:
        other = WorkspaceFactory(name="Other lab", credit_balance=Decimal("500.00"))
        member = MembershipFactory(workspace=other, role=Role.OWNER, user=UserFactory(username="olga")).user
        return create_api_key(workspace=other, created_by=member, name="agent")[1]

    other_key = await sync_to_async(other_workspace_key)()
    shared = {"RUNCRATE_MCP_SECRET": "one secret for every agent host"}
    args = {"offer_id": str(instant_offer.pk), "machines": 2, "name": "agent", "software": "none"}
    ours = StdioServerParameters(command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
                                 env=runcrate_env(live_server.url, dashboard_key, extra=shared), cwd=REPO_ROOT)
    theirs = StdioServerParameters(command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
                                   env=runcrate_env(live_server.url, other_key, extra=shared), cwd=REPO_ROOT)
    async with Client(ours) as client:
        plan = await call(client, "plan_cluster", **args)
        assert plan["can_create"] is True, plan["problems"]
    async with Client(theirs) as client:
        refusal = await refused(client, "create_cluster", **args, confirmation_token=plan["confirmation_token"])
    assert "another workspace" in refusal
    assert not await sync_to_async(Cluster.objects.exists)()


async def test_an_agent_grows_a_cluster_reads_its_events_and_manages_the_workspace(
        live_server, dashboard_key, instant_offer, developer):
    async with Client(stdio(live_server, dashboard_key)) as client:
        offer_id = instant_offer.pk  # a number: ids may be numbers or strings
        plan = await call(client, "plan_cluster", offer_id=offer_id, machines=2, name="grow")
        cluster_id = (await call(client, "create_cluster", offer_id=offer_id, machines=2, name="grow",
                                 confirmation_token=plan["confirmation_token"]))["cluster"]["id"]

        priced = await call(client, "plan_add_workers", cluster_id=str(cluster_id), count=1)
        assert priced["price_per_worker_hour"] == "2.50" and "$2.50/h each" in priced["summary"]
        assert "plan_add_workers" not in await refused(client, "add_workers", cluster_id=str(cluster_id),
                                                       confirmation_token=priced["confirmation_token"], count=2)
        grown = await call(client, "add_workers", cluster_id=str(cluster_id), count=1,
                           confirmation_token=priced["confirmation_token"])
        assert grown["cluster"]["machines"] == 3
        events = await call(client, "cluster_events", cluster_id=str(cluster_id))
        assert events["events"][0]["event"] == "created" and events["count"] >= 3

        members = await call(client, "list_members")
        dave = next(m for m in members["members"] if m["username"] == developer.username)
        changed = await call(client, "change_member_role", member_id=dave["id"], role="manager")
        assert changed["member"]["role"] == "manager"
        invited = await call(client, "invite_member", email="ada@example.com", role="developer")
        assert (await call(client, "list_invitations"))["invitations"][0]["id"] == invited["invitation"]["id"]
        environments = (await call(client, "list_environments"))["environments"]
        budget = await call(client, "set_environment_budget", environment_id=environments[0]["id"], monthly_budget="750")
        assert budget["environment"]["monthly_budget"] == "750.00"
        assert "digits 0-9" in await refused(client, "set_environment_budget", environment_id=environments[0]["id"],
                                             monthly_budget="١٢")
        volume = await call(client, "create_volume", name="corpus", size_gb=10)
        assert [v["id"] for v in (await call(client, "list_volumes"))["volumes"]] == [volume["volume"]["id"]]
