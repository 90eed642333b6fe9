"""`runcrate clusters top` and the MCP tool over real HTTP show what the API has."""

from __future__ import annotations

import datetime as dt
import sys

import pytest
from django.utils import timezone
from mcp import Client, StdioServerParameters

from clusters.nodeops.metrics import NodeReading
from metrics import collection
from metrics import services as metrics
from tests.client.client_support import REPO_ROOT, runcrate_env
from tests.e2e_client.test_mcp_live import call

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def measured(environment, instant_offer, owner):
    from clusters.services.create import create_cluster

    cluster = create_cluster(environment=environment, name="train", machine_type=instant_offer,
                                      machine_count=2, created_by=owner)
    cluster.refresh_from_db()
    nodes = collection.collected_nodes(cluster)
    start = timezone.now() - dt.timedelta(seconds=20)
    for i in range(2):
        metrics.record_round(cluster, nodes, {
            "node-0": NodeReading(exporter="up", cpu_seconds={"user": 85.0 * i, "idle": 100.0 * i + 100 - 85.0 * i},
                                  memory_total_bytes=100, memory_available_bytes=40, disks={"/": (10, 5)}),
            "node-1": NodeReading(exporter="up", cpu_seconds={"user": 1.0 * i, "idle": 100.0 * i + 100 - 1.0 * i},
                                  memory_total_bytes=100, memory_available_bytes=90, disks={"/": (10, 9)}),
        }, start + dt.timedelta(seconds=10 * i))
    return cluster


def test_top_names_the_busiest_and_idle_nodes_with_the_apis_numbers(cli, measured):
    result = cli("clusters", "top", "train", "--once")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "train: busiest node-0; idle node-1"
    assert lines[1].split()[:3] == ["NODE", "CPU", "MEM"]
    assert lines[2].split()[:4] == ["node-0", "85%", "60%", "50%"]
    assert lines[3].split()[:3] == ["node-1", "1%", "10%"]


async def test_an_agent_reads_the_same_figures(live_server, dashboard_key, measured):
    server = StdioServerParameters(command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
                                   env=runcrate_env(live_server.url, dashboard_key), cwd=REPO_ROOT)
    async with Client(server) as client:
        answer = await call(client, "cluster_metrics", cluster="train", since_seconds=600)
    assert [(r["node"], r["cpu_percent"]) for r in answer["latest"]] == [("node-0", 85.0), ("node-1", 1.0)]
    assert answer["metrics"]["resolution"] == "fine"


def test_top_on_a_terminal_prints_one_table_and_returns(live_server, dashboard_key, measured):
    import os
    import pty
    import subprocess

    # README's block is pasted into a terminal: `top` must return for the next line to run.
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen([sys.executable, "-m", "runcrate_client", "clusters", "top", "train"],
                                   stdin=secondary, stdout=secondary, stderr=secondary, cwd=REPO_ROOT,
                                   env=runcrate_env(live_server.url, dashboard_key))
        try:
            assert process.wait(timeout=60) == 0
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        output = os.read(primary, 65536).decode()
    finally:
        os.close(primary)
        os.close(secondary)
    assert "train: busiest node-0; idle node-1" in output
