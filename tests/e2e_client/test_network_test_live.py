"""The network test from the CLI and the MCP server, over real HTTP against the live API.

These clusters run on the simulated provider (no network to measure, so a test it runs fails
and says so); the results a finished test reads as are recorded through the services the
runner uses (tests/providers/test_network_test.py measures real nodes)."""

from __future__ import annotations

import json
import sys

import pytest
from mcp import Client, StdioServerParameters

from clusters.models import NetworkTest
from clusters.network_test.node import PairMeasurement
from clusters.network_test.services import claim_network_test, finish_network_test, record_network_pairs
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from tests.client.client_support import REPO_ROOT, runcrate_env
from tests.e2e_client.test_mcp_live import call, refused

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def ready(environment, instant_offer, owner):
    cluster = create_cluster(environment=environment, name="net", machine_type=instant_offer,
                                      machine_count=2, created_by=owner)
    cluster.refresh_from_db()
    assert cluster.status == "ready"
    return cluster


def measured(cluster, figures: dict[tuple[str, str], float]) -> NetworkTest:
    test = claim_network_test(
        NetworkTest.objects.create(cluster=cluster, trigger="on_demand", expected_gbps=1.0,
                                   node_names=["node-0", "node-1"]).pk
    )
    assert test is not None
    record_network_pairs(test, [PairMeasurement("ring", s, t, g, None) for (s, t), g in figures.items()])
    record_network_pairs(test, [PairMeasurement("pairs", s, t, g, 0.5) for (s, t), g in figures.items()])
    finish_network_test(test)
    test.refresh_from_db()
    return test


def test_network_test_by_name_watches_and_exits_by_the_outcome(cli, ready):
    # Simulated machines: the test runs (inline here) and cannot measure anything: exit 9.
    watched = cli("clusters", "network-test", "net", "--watch", "--interval", "0.2", "--timeout", "30")
    assert watched.returncode == 9, watched.stdout + watched.stderr
    assert "network test" in watched.stdout and "failed" in watched.stdout
    assert "no network to measure" in watched.stdout

    passed = measured(ready, {("node-0", "node-1"): 1.62, ("node-1", "node-0"): 1.48})
    shown = cli("clusters", "network-results", "net", "--watch", "--interval", "0.2")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    assert "FROM \\ TO" in shown.stdout and "1.62 / 0.50" in shown.stdout and "SLOW" not in shown.stdout
    assert f"Network test:  {passed.pk}\nStatus:        passed" in shown.stdout

    slow = measured(ready, {("node-0", "node-1"): 1.62, ("node-1", "node-0"): 0.31})
    shown = cli("clusters", "network-results", str(ready.pk), "--watch", "--interval", "0.2")
    assert shown.returncode == 8 and "0.31 / 0.50 SLOW" in shown.stdout and "2 slow pairs" in shown.stdout
    as_json = json.loads(cli("clusters", "network-results", "net", "--test", str(passed.pk), "--json").stdout)
    assert as_json["id"] == passed.pk and as_json["status"] == "passed" and len(as_json["pairs"]) == 4
    history = cli("clusters", "network-results", "net", "--history")
    assert history.returncode == 0
    assert [line.split()[0] for line in history.stdout.splitlines()[1:]] == [str(slow.pk), str(passed.pk), str(slow.pk - 2)]


def test_network_test_is_refused_clearly(cli, environment, instant_offer, owner, ready):
    missing = cli("clusters", "network-test", "nope")
    assert missing.returncode == 5 and "No cluster named 'nope'" in missing.stderr
    terminate_cluster(ready, actor="alice")
    refused_run = cli("clusters", "network-test", "net")
    assert refused_run.returncode == 6 and "not_ready" in refused_run.stderr


async def test_an_agent_starts_a_network_test_and_reads_its_results(live_server, dashboard_key, ready):
    from channels.db import database_sync_to_async

    server = StdioServerParameters(command=sys.executable, args=["-m", "runcrate_client.mcp_server"],
                                   env=runcrate_env(live_server.url, dashboard_key), cwd=REPO_ROOT)
    async with Client(server) as client:
        none_yet = await call(client, "network_test_results", cluster="net")
        assert none_yet["network_test"] is None
        started = await call(client, "start_network_test", cluster="net")
        assert started["network_test"]["nodes"] == ["node-0", "node-1"]
        first = await call(client, "network_test_results", cluster=str(ready.pk))
        assert first["network_test"]["status"] == "failed", "simulated machines: nothing to measure"

        test = await database_sync_to_async(measured)(ready, {("node-0", "node-1"): 1.7, ("node-1", "node-0"): 0.2})
        results = await call(client, "network_test_results", cluster="net")
        assert results["network_test"]["id"] == test.pk and results["network_test"]["status"] == "slow"
        slow = [p for p in results["network_test"]["pairs"] if p["slow"]]
        assert {(p["phase"], p["source"], p["target"]) for p in slow} == {("ring", "node-1", "node-0"),
                                                                        ("pairs", "node-1", "node-0")}
        assert [t["status"] for t in results["earlier"]] == ["failed"] and "under expected_gbps" in results["hint"]
        assert "404" in await refused(client, "network_test_results", cluster="net", test_id="999999")
