"""What node metrics cost: collection rounds, the page push, and storage, at 8 and 64 nodes.

- Collection: metrics.sh on every node of a cluster of sandbox sshd endpoints (loopback, one
  real prometheus-node-exporter per node), as the beat's per-cluster task runs it over the
  health rounds' kept connections: wall time, this process's CPU time (paramiko, parsing) per
  node per round, and the bytes each node sends back per round. The first round (which starts
  the exporters) is shown apart.
- Write: metrics.services.record_round for every node (a database of its own), statements.
- Push: the HTML one round pushes to each open cluster page (points + the top table).
- Storage: PostgreSQL's size of the samples table per row, hence per node: the hour of fine
  samples (one per round) and a day of 5-minute averages (kept 7 days).

The endpoints' sshd, bash and exporters share this computer's CPUs: wall times are upper
bounds of what real nodes cost. Prints figures; asserts nothing.

    .venv/bin/python bench/metrics_bench.py [--nodes 8 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clusters.node_health import node as health_node
from clusters.nodeops import operations as ops
from clusters.nodeops.metrics import NodeReading, collect_metrics
from clusters.nodeops.runner import NodeRunner, RetryPolicy
from clusters.providers.local.sandbox import start_endpoints


def collection(nodes: int, rounds: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="metrics-bench-") as workdir:
        pool = start_endpoints(nodes, workdir)
        try:
            spec = pool.spec(cluster_id="bench", software="none")
            with NodeRunner(RetryPolicy(connect_timeout=10, attempts=2, backoff=0.2)) as setup:
                if not ops.set_names(spec, runner=setup).ok:
                    raise SystemExit("set_names failed")
            with NodeRunner(health_node.HEALTH_POLICY, keep_connections=True) as kept:
                started = time.perf_counter()
                first = collect_metrics(spec, runner=kept)
                first_wall = time.perf_counter() - started
                up = sum(r.exporter == "up" for r in first.readings.values())
                walls, cpus, carried = [], [], []
                for _ in range(rounds):
                    cpu, wall = time.process_time(), time.perf_counter()
                    result = collect_metrics(spec, runner=kept)
                    walls.append(time.perf_counter() - wall)
                    cpus.append(time.process_time() - cpu)
                    carried.append(result.bytes_received)
                collect_metrics(spec, runner=kept, stop=True)
        finally:
            pool.stop()
    return {"first_wall": first_wall, "up": up, "wall": statistics.median(walls),
            "cpu_per_node_ms": statistics.median(cpus) / nodes * 1000,
            "bytes_per_node": statistics.median(carried) / nodes}


def database(sizes: list[int]) -> dict[int, dict[str, float]] | None:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        return None
    from _support import own_database, setup_django

    setup_django()
    from django.conf import settings
    from django.db import connection
    from django.template.loader import render_to_string
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from accounts.models import Environment, Workspace
    from clusters.models import Cluster, Node, Status
    from metrics import services
    from metrics.models import NodeSample, Resolution
    from offers.models import GPUModel, Host, Location, MachineType

    figures: dict[int, dict[str, float]] = {}
    with own_database("metrics"):
        workspace = Workspace.objects.create(name="bench")
        environment = Environment.objects.create(workspace=workspace, name="default", is_default=True)
        gpu = GPUModel.objects.create(slug="BENCH-M", name="bench", memory_gb=80)
        location = Location.objects.create(code="bench-m", name="bench", country="US")
        machine_type = MachineType.objects.create(
            gpu=gpu, location=location, kind="vm", gpus_per_machine=8, interconnect="eth_100g",
            price_per_machine_hour=Decimal("2.4900"), provider="simulated",
        )
        for size in sizes:
            now = timezone.now()
            cluster = Cluster.objects.create(
                workspace=workspace, environment=environment, name=f"bench-{size}", machine_type=machine_type,
                machine_count=size, price_per_machine_hour=Decimal("2.4900"), provider="simulated",
                status=Status.READY, status_changed_at=now, deadline_at=now,
            )
            hosts = Host.objects.bulk_create(
                [Host(machine_type=machine_type, name=f"bench-m-{size}-{i}", state="reserved") for i in range(size)])
            nodes = Node.objects.bulk_create(
                [Node(cluster=cluster, index=i, host=h, state=Node.State.READY) for i, h in enumerate(hosts)])

            def readings(i: int) -> dict[str, NodeReading]:
                return {n.name: NodeReading(
                    exporter="up", cpu_seconds={"user": 50.0 * i, "system": 5.0 * i, "idle": 45.0 * i},
                    memory_total_bytes=2**40, memory_available_bytes=2**39, load1=3.2, net_rx_bytes=10**6 * i,
                    net_tx_bytes=10**6 * i, disks={"/": (10**12, 5 * 10**11), "/shared": (10**12, 8 * 10**11)})
                    for n in nodes}

            interval = settings.METRICS_INTERVAL_SECONDS
            fine_rounds = settings.METRICS_FINE_RETENTION_SECONDS // interval
            start = now - dt.timedelta(seconds=interval * fine_rounds)
            times, statements = [], 0
            for i in range(fine_rounds):
                with CaptureQueriesContext(connection) as queries:
                    began = time.perf_counter()
                    samples = services.record_round(cluster, nodes, readings(i), start + dt.timedelta(seconds=interval * i))
                    times.append(time.perf_counter() - began)
                statements = len(queries.captured_queries)
            names = {n.pk: n.name for n in nodes}
            push = render_to_string("clusters/_metrics_push.html", {
                "payload": services.push_payload(cluster, samples, names), "cluster": cluster,
                "top_rows": services.top(cluster), "oob": True})
            day = 86400 // settings.METRICS_COARSE_STEP_SECONDS
            coarse_start = services.bucket_start(now, settings.METRICS_COARSE_STEP_SECONDS) - dt.timedelta(days=1)
            NodeSample.objects.bulk_create([
                NodeSample(cluster=cluster, node=n, resolution=Resolution.COARSE,
                           at=coarse_start + dt.timedelta(seconds=settings.METRICS_COARSE_STEP_SECONDS * b),
                           cpu_percent=55.0, memory_used_bytes=2**39, memory_total_bytes=2**40, net_rx_bps=8e6,
                           net_tx_bps=8e6, load1=3.2, root_used_bytes=5 * 10**11, root_total_bytes=10**12)
                for n in nodes for b in range(day)])
            figures[size] = {"record_ms": statistics.median(times) * 1000, "statements": statements,
                             "push_bytes": len(push.encode()), "fine_rows": fine_rounds, "coarse_rows": day}
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_total_relation_size('metrics_nodesample')")
            total_bytes = cursor.fetchone()[0]
        rows = NodeSample.objects.count()
        fine = NodeSample.objects.filter(resolution=Resolution.FINE).count()
        for size in figures:
            figures[size]["bytes_per_row"] = total_bytes / rows
            figures[size]["fine_share"] = fine / rows
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("prometheus-node-exporter") is None:
        raise SystemExit("apt-get install prometheus-node-exporter")
    rounds = {size: collection(size, args.rounds) for size in args.nodes}
    print(f"\nnode metrics bench: sandbox sshd endpoints with a real node exporter each, {os.cpu_count()} CPUs, "
          f"median of {args.rounds} warm rounds")
    print(f"{'nodes':>5} | {'first round':>11} | {'round wall':>10} | {'CPU/node/round':>14} | {'bytes/node/round':>16}")
    print("-" * 70)
    for size, r in rounds.items():
        print(f"{size:>5} | {r['first_wall']:>10.2f}s | {r['wall']:>9.2f}s | {r['cpu_per_node_ms']:>11.1f} ms | "
              f"{r['bytes_per_node']:>16.0f}   ({int(r['up'])}/{size} exporters up)")
    stored = database(args.nodes)
    if stored is None:
        print("storage and push: skipped (set DATABASE_URL=postgres://… to measure them)")
        return
    print(f"\n{'nodes':>5} | {'record_round':>12} | {'statements':>10} | {'push to a page':>14} | per node: hour of fine + day of coarse")
    print("-" * 96)
    for size, s in stored.items():
        per_node_day = s["bytes_per_row"] * s["coarse_rows"]
        per_node_hour = s["bytes_per_row"] * s["fine_rows"]
        print(f"{size:>5} | {s['record_ms']:>9.1f} ms | {int(s['statements']):>10} | {s['push_bytes'] / 1024:>11.1f} KB | "
              f"{per_node_hour / 1024:.0f} KB + {per_node_day / 1024:.0f} KB/day "
              f"(≈{s['bytes_per_row']:.0f} B/row with indexes; at retention ≤ "
              f"{(per_node_hour + 7 * per_node_day) / 2**20:.1f} MB per node)")


if __name__ == "__main__":
    main()
