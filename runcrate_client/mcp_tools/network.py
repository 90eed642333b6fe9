from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from runcrate_client.mcp_common import READ_ONLY, ToolContext, api_errors_as_tool_errors

HINTS = {
    "queued": "Waiting for a worker; poll network_test_results in ~5 s.",
    "running": "Pairs fill in as they finish (about half a minute for up to 8 nodes); poll again in ~5 s.",
    "passed": "Every pair carried at least expected_gbps.",
    "slow": "Some pairs are under expected_gbps (see pairs[].slow and detail): the machines involved may have "
            "a bad link; self-serve clusters promise about 1-2 Gbit/s on the encrypted network.",
    "failed": "The test could not run or a pair could not be measured; detail says why.",
}


def register(mcp: MCPServer, tools: ToolContext) -> None:
    client = tools.client

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def start_network_test(cluster: str) -> dict[str, Any]:
        """Measure a ready cluster's private network (cluster: name or id). Runs iperf3 and ping over
        wg0 between every node and the next at once, then every pair for up to 8 nodes (all_reduce_perf on
        GPU machines that have nccl-tests). Jobs keep running. Refused (409) while the cluster is not ready
        or another test is queued or running. Read the results with network_test_results."""
        cluster_id = client.find_cluster_id(cluster)
        test = client.network_tests.start(cluster_id)
        return {"network_test": test, "hint": HINTS["queued"]}

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def network_test_results(cluster: str, test_id: str | None = None) -> dict[str, Any]:
        """A cluster's newest network test (or test_id): status, every measured pair (source, target,
        gbps, latency_ms, slow, error), a summary, and the earlier runs' summaries."""
        cluster_id = client.find_cluster_id(cluster)
        earlier = client.network_tests.list(cluster_id, limit=6).items
        if test_id is None:
            if not earlier:
                return {"network_test": None, "hint": "No test yet: start_network_test runs one."}
            test_id = str(earlier[0].get("id"))
        test = client.network_tests.get(cluster_id, test_id)
        return {
            "network_test": test,
            "earlier": [{k: t.get(k) for k in ("id", "status", "trigger", "created_at", "summary")}
                        for t in earlier if str(t.get("id")) != str(test_id)][:5],
            "hint": HINTS.get(str(test.get("status")), ""),
        }

    @mcp.tool(annotations=READ_ONLY)
    @api_errors_as_tool_errors
    def cluster_metrics(cluster: str, since_seconds: int = 900, step_seconds: int | None = None) -> dict[str, Any]:
        """Per-node metrics of a cluster (name or id): CPU %, memory, disk / and /shared %, wg0 bits/s in and
        out, load, and GPU utilisation/memory/temperature/ECC errors where GPUs report. Fine points (every 10 s)
        for the last hour, 5-minute averages up to 7 days. `latest` has each node's newest figures, busiest
        first; a node under 5% CPU and GPU is idle (still billed)."""
        from runcrate_client.cli.top import latest

        cluster_id = client.find_cluster_id(cluster)
        metrics = client.metrics.get_cluster(cluster_id, since=str(since_seconds), step=step_seconds)
        return {"latest": latest(metrics), "metrics": metrics}

