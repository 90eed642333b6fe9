"""runcrate clusters top NAME: every node's latest CPU, memory, disk, private-network and GPU
figures, busiest first, redrawn every few seconds on a terminal (Ctrl-C to stop), or once with
--once or when the output is not a terminal."""

from __future__ import annotations

import sys
import time
from typing import Any

import click

from runcrate_client.api import Record
from runcrate_client.cli.base import State, json_option, pass_state, print_json
from runcrate_client.cli.clusters import clusters
from runcrate_client.client import Client
from runcrate_client.formatting import render_table

IDLE_PERCENT = 5.0
NO_FIGURE = "—"


def _pct(value: Any) -> str:
    return NO_FIGURE if value is None else f"{float(value):.0f}%"


def _bits(value: Any) -> str:
    if value is None:
        return NO_FIGURE
    value = float(value)
    for unit in ("bit/s", "kbit/s", "Mbit/s", "Gbit/s"):
        if value < 1000 or unit == "Gbit/s":
            return f"{value:.0f} {unit}" if unit == "bit/s" else f"{value:.1f} {unit}"
        value /= 1000
    return NO_FIGURE


def latest(metrics: Record) -> list[dict[str, Any]]:
    """Each node's newest point, busiest first (CPU or GPU, whichever is higher)."""
    rows = []
    for node in metrics.get("nodes") or []:
        points = node.get("points") or []
        rows.append({"node": node.get("node"), **(points[-1] if points else {})})

    def busy(row: dict[str, Any]) -> float:
        return max(float(row.get("cpu_percent") or 0), float(row.get("gpu_percent") or 0))

    return sorted(rows, key=lambda r: (r.get("cpu_percent") is None, -busy(r)))


def render(name: str, rows: list[dict[str, Any]]) -> str:
    gpu = any(r.get("gpu_percent") is not None for r in rows)
    headers = ["NODE", "CPU", "MEM", "DISK /", "/SHARED", "WG0 IN", "WG0 OUT", "LOAD"] + (
        ["GPU", "GPU °C", "GPU ERR"] if gpu else [])
    table = []
    for r in rows:
        if r.get("cpu_percent") is None:
            # A node's first round has no rates yet (they need two): its row waits for them
            # whole instead of showing a half-read machine.
            table.append([r["node"], *[NO_FIGURE] * (len(headers) - 1)])
            continue
        line = [r["node"], _pct(r.get("cpu_percent")), _pct(r.get("memory_percent")), _pct(r.get("root_percent")),
                _pct(r.get("shared_percent")), _bits(r.get("net_rx_bps")), _bits(r.get("net_tx_bps")),
                NO_FIGURE if r.get("load1") is None else f"{float(r['load1']):.2f}"]
        if gpu:
            line += [_pct(r.get("gpu_percent")),
                     NO_FIGURE if r.get("gpu_temperature_c") is None else f"{r['gpu_temperature_c']:.0f}",
                     NO_FIGURE if r.get("gpu_errors") is None else str(int(r["gpu_errors"]))]
        table.append(line)
    measured = [r for r in rows if r.get("cpu_percent") is not None]
    summary = f"{name}: no figures yet (they arrive every 10 s once the cluster is ready)"
    if measured:
        idle = sorted((r["node"] for r in measured
                       if max(float(r.get("cpu_percent") or 0), float(r.get("gpu_percent") or 0)) < IDLE_PERCENT),
                      key=lambda node: int(str(node).rpartition("-")[2] or 0))
        if measured[0]["node"] in idle:
            summary = f"{name}: every node idle"
        else:
            summary = f"{name}: busiest {measured[0]['node']}" + (f"; idle {', '.join(idle)}" if idle else "; none idle")
    return summary + "\n" + render_table(headers, table, right=range(1, len(headers)))


@clusters.command("top")
@click.argument("cluster")
@click.option("--watch", is_flag=True, help="Redraw the table every --interval seconds until Ctrl-C.")
@click.option("--once", is_flag=True, hidden=True, help="One table and exit (the default; kept for older scripts).")
@click.option("--interval", default=5.0, show_default=True, type=click.FloatRange(1, 3600), help="Seconds between redraws.")
@json_option
@pass_state
def clusters_top(state: State, cluster: str, watch: bool, once: bool, interval: float, as_json: bool) -> None:
    """Per-node CPU, memory, disk, wg0 and GPU figures of a cluster (NAME or id), busiest first.

    Prints one table and exits, so a pasted block of commands goes on after it (on a terminal
    too); --watch redraws it until Ctrl-C."""
    watch = watch and not once and not as_json
    client: Client = state.client()
    cluster_id = client.find_cluster_id(cluster)
    while True:
        rows = latest(client.metrics.get_cluster(cluster_id, since="120"))
        if as_json:
            print_json(rows)
        else:
            if watch and sys.stdout.isatty():
                click.clear()
            click.echo(render(cluster, rows))
        if not watch:
            return
        time.sleep(interval)
