"""runcrate clusters network-test / network-results: measure a cluster's private network and
read the node x node matrix (Gbit/s, ping ms)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import click

from runcrate_client.api import Record
from runcrate_client.cli.base import (
    EXIT_NETWORK_FAILED,
    EXIT_NETWORK_SLOW,
    EXIT_OK,
    EXIT_OTHER,
    State,
    json_option,
    pass_state,
    print_json,
)
from runcrate_client.cli.clusters import clusters
from runcrate_client.client import Client
from runcrate_client.formatting import format_time, render_pairs, render_table

# Partly measured: some pairs have no figure, as when none could be measured.
FINISHED = {"passed": EXIT_OK, "slow": EXIT_NETWORK_SLOW, "partial": EXIT_NETWORK_FAILED, "failed": EXIT_NETWORK_FAILED}


@clusters.command("network-test")
@click.argument("cluster")
@click.option("--watch", is_flag=True, help="Print the matrix as pairs finish; exit 0 passed, 8 slow, 9 could not run.")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between polls with --watch.")
@click.option("--timeout", default=0.0, show_default=True, help="Give up watching after this many seconds (0: never).")
@json_option
@pass_state
def clusters_network_test(state: State, cluster: str, watch: bool, interval: float, timeout: float, as_json: bool) -> None:
    """Measure the private network of a ready cluster (NAME or id): every node to the next at once,
    then every pair (up to 8 nodes) with iperf3 and ping over wg0, or all_reduce_perf on GPU machines."""
    client = state.client()
    cluster_id = client.find_cluster_id(cluster)
    test = client.network_tests.start(cluster_id)
    if not watch:
        if as_json:
            return print_json(test)
        click.echo(f"Network test {test.get('id')} of cluster {cluster} queued. Follow it with: "
                   f"runcrate clusters network-results {cluster} --watch")
        return
    sys.exit(follow(client, cluster_id, str(test.get("id")), interval, timeout, as_json))


@clusters.command("network-results")
@click.argument("cluster")
@click.option("--test", "test_id", help="A test id (default: the newest).")
@click.option("--history", is_flag=True, help="List the cluster's tests instead, newest first.")
@click.option("--watch", is_flag=True, help="Follow the test until it finishes (exit codes as network-test --watch).")
@click.option("--interval", default=2.0, show_default=True, help="Seconds between polls with --watch.")
@json_option
@pass_state
def clusters_network_results(state: State, cluster: str, test_id: str | None, history: bool, watch: bool,
                             interval: float, as_json: bool) -> None:
    """A cluster's network test results: the node x node matrix (rows send, columns receive)."""
    client = state.client()
    cluster_id = client.find_cluster_id(cluster)
    if history:
        items = client.network_tests.list(cluster_id, limit=20).items
        if as_json:
            return print_json(items)
        if not items:
            return click.echo(f"No network tests yet. Run one with: runcrate clusters network-test {cluster}")
        rows = [[t.get("id"), t.get("status"), t.get("trigger_label") or t.get("trigger"), t.get("method"), format_time(t.get("created_at")),
                 span(t.get("summary") or {}), (t.get("summary") or {}).get("slow_pairs")] for t in items]
        return click.echo(render_table(["ID", "STATUS", "STARTED", "METHOD", "CREATED", "GBIT/S", "SLOW"], rows))
    if test_id is None:
        newest = client.network_tests.list(cluster_id, limit=1).items
        if not newest:
            if as_json:
                return print_json(None)
            return click.echo(f"No network tests yet. Run one with: runcrate clusters network-test {cluster}")
        test_id = str(newest[0].get("id"))
    if watch:
        sys.exit(follow(client, cluster_id, test_id, interval, 0, as_json))
    test = client.network_tests.get(cluster_id, test_id)
    if as_json:
        return print_json(test)
    click.echo(report(test))


def follow(client: Client, cluster_id: str, test_id: str, interval: float, timeout: float, quiet: bool) -> int:
    """Poll a test, printing each newly measured pair, then the matrix and the outcome."""
    say: Callable[[str], None] = (lambda _: None) if quiet else click.echo
    started = time.monotonic()
    seen: set[tuple[str, str, str]] = set()
    status = None
    while True:
        test = client.network_tests.get(cluster_id, test_id)
        if test.get("status") != status:
            status = test.get("status")
            say(f"network test {test_id}: {status}")
        for pair in test.get("pairs") or []:
            key = (str(pair.get("phase")), str(pair.get("source")), str(pair.get("target")))
            if key not in seen:
                seen.add(key)
                say(f"  {key[0]:<5} {key[1]} -> {key[2]}: {pair_text(pair)}")
        if status in FINISHED:
            if quiet:
                print_json(test)
            else:
                click.echo(report(test))
            return FINISHED[str(status)]
        if timeout and time.monotonic() - started > timeout:
            say(f"Gave up after {timeout:g}s; the test is still {status}.")
            return EXIT_OTHER
        time.sleep(interval)


def pair_text(pair: Record) -> str:
    if pair.get("error"):
        return f"error: {pair['error']}"
    text = f"{pair.get('gbps'):.2f} Gbit/s"
    if pair.get("latency_ms") is not None:
        text += f", {pair['latency_ms']:.2f} ms"
    return text + (" SLOW" if pair.get("slow") else "")


def span(summary: Record) -> str:
    low, high = summary.get("min_gbps"), summary.get("max_gbps")
    return "-" if low is None else f"{low:.2f}-{high:.2f}"


def matrix(test: Record, phase: str = "pairs") -> str:
    """Rows send, columns receive: 'Gbit/s / ms', SLOW or ERROR in words."""
    nodes = list(test.get("nodes") or [])
    found = {(p.get("source"), p.get("target")): p for p in test.get("pairs") or [] if p.get("phase") == phase}
    rows = []
    for source in nodes:
        row: list[str] = [source]
        for target in nodes:
            pair = found.get((source, target))
            if source == target:
                row.append("-")
            elif pair is None:
                row.append("...")
            elif pair.get("error"):
                row.append("ERROR")
            else:
                latency = pair.get("latency_ms")
                row.append(f"{pair.get('gbps'):.2f}" + (f" / {latency:.2f}" if latency is not None else "")
                           + (" SLOW" if pair.get("slow") else ""))
        rows.append(row)
    return render_table(["FROM \\ TO", *nodes], rows)


def report(test: Record) -> str:
    summary = test.get("summary") or {}
    pairs = [
        ("Network test", test.get("id")),
        ("Status", test.get("status")),
        ("Method", test.get("method")),
        ("Started", test.get("trigger_label") or test.get("trigger")),
        ("Finished", format_time(test.get("finished_at"))),
        ("Measured", f"{summary.get('pairs_measured')} of {summary.get('pairs_expected')}"
                     if summary.get("pairs_expected") else summary.get("pairs_measured")),
        ("Slow below", f"{test.get('expected_gbps')} Gbit/s"),
    ]
    text = render_pairs(pairs)
    if any(p.get("phase") == "pairs" for p in test.get("pairs") or []):
        text += "\n\nEvery pair, one at a time (Gbit/s / ping ms; rows send, columns receive):\n" + matrix(test)
    ring = [p for p in test.get("pairs") or [] if p.get("phase") == "ring"]
    if ring:
        text += "\n\nRing, every node to the next at once:\n" + "\n".join(
            f"  {p.get('source')} -> {p.get('target')}: {pair_text(p)}" for p in ring)
    if test.get("nccl"):
        rows = [[r.get("size_bytes"), r.get("time_us"), r.get("algbw_gbs"), r.get("busbw_gbs")] for r in test["nccl"]]
        text += "\n\nall_reduce_perf:\n" + render_table(["SIZE (B)", "TIME (US)", "ALGBW (GB/S)", "BUSBW (GB/S)"], rows,
                                                       right={0, 1, 2, 3})
    if test.get("detail"):
        text += f"\n\n{test['detail']}"
    return text
