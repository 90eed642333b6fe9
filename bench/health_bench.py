"""What the node health check costs the control plane: one round over a 64-node cluster.

A 64-node Slurm cluster on local sshd endpoints (loopback, sandbox roots; the sandbox's
stand-ins answer for wg0, slurmd and sinfo) is brought up once; then rounds of
clusters.node_health.node.check_health run against it as the beat's per-cluster task runs them:

- cold: a fresh runner (the first round a worker process makes for a cluster): a new SSH
  connection per node, then one session each;
- warm: the same runner round after round (clusters.providers.fabric.HEALTH_RUNNERS keeps
  it per cluster): no new connection, one session per node.

For each: wall time, this process's CPU time (every thread: paramiko, parsing, judging),
SSH connections opened and sessions run (counted on fabric/paramiko calls). Then the write:
services.record_node_health for the 64 nodes, in a database of its own (bench/_support.py),
with the statements it sends. The endpoints' sshd and bash run on the same CPUs, so wall
time here is an upper bound of what real nodes (doing their part on their own hardware) cost.
Prints figures; asserts nothing.

    .venv/bin/python bench/health_bench.py [--nodes 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import paramiko
from fabric import Connection

from clusters.node_health import node as health_node
from clusters.nodeops import operations as ops
from clusters.nodeops.runner import NodeRunner, RetryPolicy
from clusters.providers.local.sandbox import start_endpoints


class Counted:
    """Counts SSH connections opened and sessions created while it is active."""

    def __init__(self) -> None:
        self.connections = 0
        self.sessions = 0
        # SSHClient.connect: a new SSH transport (Connection.open also runs, as a no-op, before
        # every session on an open connection).
        self._open = paramiko.SSHClient.connect
        self._session = Connection.create_session

    def __enter__(self) -> Counted:
        counter = self

        def open_(client, *args, **kwargs):
            counter.connections += 1
            return counter._open(client, *args, **kwargs)

        def session(connection):
            counter.sessions += 1
            return counter._session(connection)

        paramiko.SSHClient.connect = open_  # type: ignore[method-assign]
        Connection.create_session = session  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc_info: object) -> None:
        paramiko.SSHClient.connect = self._open  # type: ignore[method-assign]
        Connection.create_session = self._session  # type: ignore[method-assign]


def one_round(spec, runner: NodeRunner) -> tuple[float, float, int, int, dict[str, int]]:
    with Counted() as counted:
        cpu, wall = time.process_time(), time.perf_counter()
        result = health_node.check_health(spec, runner=runner)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    verdicts: dict[str, int] = {}
    for verdict in result.health.values():
        verdicts[verdict.health] = verdicts.get(verdict.health, 0) + 1
    return wall, cpu, counted.connections, counted.sessions, verdicts


def bring_up(spec, runner: NodeRunner) -> None:
    secrets = ops.generate_secrets(spec)
    for step in (
        lambda: ops.set_names(spec, runner=runner),
        lambda: ops.join_network(spec, secrets=secrets, runner=runner, wait_seconds=60),
        lambda: ops.install_software(spec, secrets=secrets, runner=runner),
    ):
        result = step()
        if not result.ok:
            raise SystemExit(result.summary())


def record_cost(nodes: int) -> tuple[float, int] | None:
    """services.record_node_health over `nodes` nodes: (seconds, statements), twice-measured
    median of a round that changes nothing but the check time."""
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        return None
    from _support import own_database, setup_django

    setup_django()
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils import timezone

    from accounts.models import Environment, Workspace
    from clusters.models import Cluster, Node, NodeHealth, Status
    from clusters.node_health.services import record_node_health
    from offers.models import GPUModel, Host, Location, MachineType

    with own_database("health"):
        workspace = Workspace.objects.create(name="bench")
        environment = Environment.objects.create(workspace=workspace, name="default", is_default=True)
        gpu = GPUModel.objects.create(slug="BENCH-H", name="bench", memory_gb=80)
        location = Location.objects.create(code="bench-h", name="bench", country="US")
        machine_type = MachineType.objects.create(
            gpu=gpu, location=location, kind="vm", gpus_per_machine=8, interconnect="eth_100g",
            price_per_machine_hour=Decimal("2.4900"), provider="simulated",
        )
        now = timezone.now()
        cluster = Cluster.objects.create(
            workspace=workspace, environment=environment, name="bench", machine_type=machine_type,
            machine_count=nodes, price_per_machine_hour=Decimal("2.4900"), provider="simulated", status=Status.READY,
            status_changed_at=now, deadline_at=now,
        )
        hosts = Host.objects.bulk_create(
            [Host(machine_type=machine_type, name=f"bench-h-{i}", state="reserved") for i in range(nodes)]
        )
        rows = Node.objects.bulk_create(
            [Node(cluster=cluster, index=i, host=host, state=Node.State.READY) for i, host in enumerate(hosts)]
        )
        found = {node.pk: (NodeHealth.HEALTHY, "reaches 63 peers over wg0; slurmd running; idle in sinfo") for node in rows}
        record_node_health(cluster.pk, found)  # unknown -> healthy: every row changes once
        times, statements = [], 0
        for _ in range(3):
            with CaptureQueriesContext(connection) as queries:
                started = time.perf_counter()
                record_node_health(cluster.pk, found)
                times.append(time.perf_counter() - started)
            statements = len(queries.captured_queries)
        return statistics.median(times), statements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--software", default="slurm", choices=["none", "slurm", "ray", "kubernetes"])
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="health-bench-") as workdir:
        pool = start_endpoints(args.nodes, workdir)
        try:
            spec = pool.spec(cluster_id="bench", software=args.software)
            with NodeRunner(RetryPolicy(connect_timeout=10, attempts=2, backoff=0.2)) as setup:
                bring_up(spec, setup)
            cold = []
            for _ in range(args.rounds):
                with NodeRunner(health_node.HEALTH_POLICY, keep_connections=True) as fresh:
                    cold.append(one_round(spec, fresh))
            with NodeRunner(health_node.HEALTH_POLICY, keep_connections=True) as kept:
                one_round(spec, kept)
                warm = [one_round(spec, kept) for _ in range(args.rounds)]
        finally:
            pool.stop()

    print(f"\nnode health bench: one round over {args.nodes} {args.software} nodes (sandbox sshd endpoints), "
          f"{os.cpu_count()} CPUs, median of {args.rounds}")
    print(f"{'round':<6} | {'wall':>7} | {'control-plane CPU':>17} | {'connections':>11} | {'sessions':>8} | verdicts")
    print("-" * 78)
    for label, rows in (("cold", cold), ("warm", warm)):
        wall = statistics.median(r[0] for r in rows)
        cpu = statistics.median(r[1] for r in rows)
        print(f"{label:<6} | {wall:>6.2f}s | {cpu:>16.2f}s | {rows[-1][2]:>11} | {rows[-1][3]:>8} | {rows[-1][4]}")
    recorded = record_cost(args.nodes)
    if recorded is None:
        print("record_node_health: skipped (set DATABASE_URL=postgres://… to measure the write)")
    else:
        seconds, statements = recorded
        print(f"record_node_health, {args.nodes} nodes, nothing changed: {seconds * 1000:.1f} ms, {statements} statements")


if __name__ == "__main__":
    main()
