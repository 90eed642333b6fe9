"""Benchmark: one metering run over N running machines — time and number of queries.

    DATABASE_URL=postgres://… python bench/metering_bench.py [--sizes 100 1000 10000]

Runs in a database of its own (bench/_support.py), created from DATABASE_URL's server and
dropped at the end, so a run meters only the machines it built: never the machines of a
`make run` or of anyone else sharing the server. Each size is built inside one transaction
rolled back afterwards. The query count must be the same for every N.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _support

_support.setup_django()

from django.db import connection, transaction  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from accounts.models import Environment, Workspace  # noqa: E402
from billing import services as billing  # noqa: E402
from billing.models import MachineUsage  # noqa: E402
from clusters.models import Cluster, Node, Status  # noqa: E402
from offers.models import GPUModel, Host, Location, MachineType  # noqa: E402

MACHINES_PER_CLUSTER = 8
CLUSTERS_PER_WORKSPACE = 25
T0 = dt.datetime(2030, 1, 15, tzinfo=dt.UTC)


class Rollback(Exception):
    pass


def build(machines: int, tag: str) -> None:
    gpu, _ = GPUModel.objects.get_or_create(slug=f"BENCH-{tag}", defaults={"name": "bench", "memory_gb": 80})
    location, _ = Location.objects.get_or_create(code=f"bench-{tag}", defaults={"name": "bench", "country": "US"})
    machine_type = MachineType.objects.create(
        gpu=gpu, location=location, kind="vm", gpus_per_machine=8, interconnect="eth_100g",
        price_per_machine_hour=Decimal("2.4900"), provider="simulated",
    )
    hosts = Host.objects.bulk_create(
        [Host(machine_type=machine_type, name=f"bench-{tag}-{i}", state="reserved") for i in range(machines)]
    )
    clusters_needed = -(-machines // MACHINES_PER_CLUSTER)  # the last cluster may be smaller (N ≡ 4 mod 8 here)
    workspaces = Workspace.objects.bulk_create(
        [Workspace(name=f"bench {tag} {i}", credit_balance=Decimal("100000"))
         for i in range((clusters_needed + CLUSTERS_PER_WORKSPACE - 1) // CLUSTERS_PER_WORKSPACE)]
    )
    environments = Environment.objects.bulk_create(
        [Environment(workspace=w, name="default", is_default=True, monthly_budget=Decimal("1000000")) for w in workspaces]
    )
    clusters = Cluster.objects.bulk_create([
        Cluster(
            workspace=workspaces[i // CLUSTERS_PER_WORKSPACE], environment=environments[i // CLUSTERS_PER_WORKSPACE],
            name=f"bench-{i}", machine_type=machine_type, machine_count=MACHINES_PER_CLUSTER,
            price_per_machine_hour=Decimal("2.4900"), provider="simulated", status=Status.READY,
            status_changed_at=T0, deadline_at=T0, billing_started_at=T0,
        )
        for i in range(clusters_needed)
    ])
    nodes = Node.objects.bulk_create([
        Node(cluster=clusters[i // MACHINES_PER_CLUSTER], index=i % MACHINES_PER_CLUSTER, host=host,
             state=Node.State.READY, billing_started_at=T0)
        for i, host in enumerate(hosts)
    ])
    MachineUsage.objects.bulk_create([
        MachineUsage(node=node, cluster_id=node.cluster_id, workspace_id=node.cluster.workspace_id,
                     environment_id=node.cluster.environment_id, rate=Decimal("2.4900"), started_at=T0, billed_until=T0)
        for node in nodes
    ], batch_size=2000)


def measure(machines: int) -> tuple[int, float, int, int, Decimal]:
    result = {}
    try:
        with transaction.atomic():
            build(machines, str(machines))
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                run = billing.meter_usage(T0 + dt.timedelta(seconds=3601))
                elapsed = time.perf_counter() - started
            again = billing.meter_usage(T0 + dt.timedelta(seconds=3601))
            assert again.posted == 0, "a rerun must post nothing"
            result = {"queries": len(queries.captured_queries), "elapsed": elapsed, "machines": run.machines,
                      "entries": run.entries, "posted": run.posted}
            raise Rollback
    except Rollback:
        pass
    return result["machines"], result["elapsed"], result["queries"], result["entries"], result["posted"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    args = parser.parse_args()
    with _support.own_database("metering"):
        run(args.sizes)


def run(sizes: list[int]) -> None:
    print(f"database: {connection.vendor}, {connection.settings_dict['NAME']} (this bench's own)")
    print(f"{'machines':>9} {'metered':>8} {'entries':>8} {'queries':>8} {'seconds':>8} {'posted $':>12}")
    counts = set()
    for size in sizes:
        machines, elapsed, queries, entries, posted = measure(size)
        counts.add(queries)
        print(f"{size:>9} {machines:>8} {entries:>8} {queries:>8} {elapsed:>8.3f} {posted:>12}")
    print("query count is constant in N" if len(counts) == 1 else f"query count varies with N: {sorted(counts)}")


if __name__ == "__main__":
    main()
