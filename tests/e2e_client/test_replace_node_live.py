"""Replacing a node from the `runcrate` CLI (a subprocess) and from an agent over MCP, against the live API."""

from __future__ import annotations

import json
import sys

import pytest
from mcp import Client, StdioServerParameters

from clusters.models import Node
from clusters.services.create import create_cluster
from tests.client.client_support import REPO_ROOT, run_runcrate, runcrate_env
from tests.e2e_client.test_mcp_live import call, refused

pytestmark = pytest.mark.django_db(transaction=True)


def ready_cluster(environment, machine_type, name: str):
    cluster = create_cluster(environment=environment, name=name, machine_type=machine_type, machine_count=3)
    cluster.refresh_from_db()
    assert cluster.status == "ready"
    return cluster


def test_the_cli_replaces_a_node_and_watches_the_swap(live_server, dashboard_key, instant_offer, environment):
    def runcrate(*args: str):
        return run_runcrate(list(args), base_url=live_server.url, api_key=dashboard_key)

    cluster = ready_cluster(environment, instant_offer, "cli-swap")
    old = cluster.nodes.get(index=1)

    unasked = runcrate("clusters", "replace-node", str(cluster.pk), "node-1")
    assert unasked.returncode == 2 and "--yes" in unasked.stderr
    head = runcrate("clusters", "replace-node", str(cluster.pk), "node-0", "--yes")
    assert head.returncode == 6 and "head_replace_refused" in head.stderr

    swapped = runcrate("clusters", "replace-node", "cli-swap", "node-1", "--yes", "--watch", "--interval", "0.2")
    assert swapped.returncode == 0, swapped.stdout + swapped.stderr
    assert "node-1 now runs on the new machine" in swapped.stdout and "[Node replaced]" in swapped.stdout

    info = json.loads(runcrate("clusters", "info", str(cluster.pk), "--json").stdout)
    node_1 = [n for n in info["nodes"] if n["name"] == "node-1"]
    assert [(n["status"], n["replacing"]) for n in node_1] == [("stopped", False), ("ready", False)]
    assert node_1[0]["instance_id"] == old.pk
    assert Node.objects.get(pk=node_1[1]["instance_id"]).host_id != old.host_id


@pytest.fixture
def agent_cluster(live_server, instant_offer, environment):
    return ready_cluster(environment, instant_offer, "agent-swap")


async def test_an_agent_plans_then_replaces_a_node_with_the_token(live_server, dashboard_key, agent_cluster):
    cluster = agent_cluster
    server = StdioServerParameters(command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
                                   env=runcrate_env(live_server.url, dashboard_key), cwd=REPO_ROOT)
    async with Client(server) as client:
        head = await call(client, "plan_replace_node", cluster_id=str(cluster.pk), node_name="node-0")
        assert head["can_replace"] is False and "confirmation_token" not in head
        plan = await call(client, "plan_replace_node", cluster_id=str(cluster.pk), node_name="node-2")
        assert plan["can_replace"] is True and plan["extra_per_hour_while_swapping"] == "2.50"
        token = plan["confirmation_token"]

        assert "node_name" in await refused(client, "replace_node", cluster_id=str(cluster.pk), node_name="node-1",
                                            confirmation_token=token)
        done = await call(client, "replace_node", cluster_id=str(cluster.pk), node_name="node-2",
                          confirmation_token=token)
        assert "node_replaced" in done["next_step"]
        status = await call(client, "cluster_status", cluster_id=str(cluster.pk))
        assert status["recent_events"][-1]["event"] == "node_replaced"
        assert not any(n["replacing"] for n in status["cluster"]["nodes"])
