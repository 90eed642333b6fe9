"""Create → ready on the `local` provider, through the whole control plane, at 2, 8 and 32
machines: the issue-13 row "create → ready, local, 32 vs 2 machines".

Each run creates a cluster with `services.create_cluster` (the service the API and the
dashboard call) and drives it with `lifecycle.advance`, as a worker does when a pass asks
to be looked at again: leases, heartbeats, node output, pushes and billing all run. The
machines are real Linux nodes in namespaces where this computer allows (else the loopback
sandboxes `make run` falls back to). Prints, per size and software, the time to ready, its
ratio to 2 machines, the CPU the control plane itself spent (this process: SSH sessions,
crypto, queries), the CPU every other process used meanwhile (the nodes' own work: their
sshd sessions, scripts, wireguard-go, munge, slurmd; and whatever else runs), and how busy
that kept this computer's CPUs: near 100% means the work on the CPUs, not waiting, set the
time. Asserts nothing.

    DATABASE_URL=postgres://… .venv/bin/python bench/time_to_ready_bench.py [--sizes 2,8,32] [--software none,slurm]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")
os.environ.setdefault("LOG_LEVEL", "CRITICAL")
import _support

_support.setup_django()

from django.conf import settings  # noqa: E402

from clusters import lifecycle  # noqa: E402
from clusters.models import Cluster, Status  # noqa: E402
from clusters.providers.local import provider as local  # noqa: E402
from clusters.services.create import create_cluster  # noqa: E402
from clusters.services.terminate import terminate_cluster  # noqa: E402
from offers.models import Host  # noqa: E402
from tests.factories import MachineTypeFactory, WorkspaceFactory  # noqa: E402

SETTLED = {Status.READY, Status.DEGRADED, Status.FAILED}


def one_run(environment, count: int, software: str, block: int) -> tuple[float, float, float, str]:
    machine_type = MachineTypeFactory(provider="local", kind="vm", price_per_machine_hour=Decimal("1.00"))
    Host.objects.bulk_create(
        Host(machine_type=machine_type, name=f"ttr-{block}-{i}", address=f"127.76.{block}.{i + 1}", port=2222)
        for i in range(count)
    )
    started, cpu, machine_cpu = time.monotonic(), time.process_time(), _support.machine_cpu_seconds()
    cluster = create_cluster(environment=environment, name=f"ttr-{block}", machine_type=machine_type,
                                      machine_count=count, software=software)
    deadline = started + 300
    while True:
        again = lifecycle.advance(cluster.pk)
        cluster.refresh_from_db()
        if cluster.status in SETTLED or time.monotonic() > deadline:
            break
        if not again:
            time.sleep(0.05)
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    machine_cpu = _support.machine_cpu_seconds() - machine_cpu
    outcome = cluster.status
    stopping = time.monotonic()
    terminate_cluster(cluster)
    lifecycle.advance(cluster.pk)
    return seconds, cpu, machine_cpu, f"{outcome}; terminated in {time.monotonic() - stopping:.1f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8,32")
    parser.add_argument("--software", default="none,slurm")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    with _support.own_database("ready"), tempfile.TemporaryDirectory(prefix="rc-ttr-") as machines:
        settings.LOCAL_MACHINES_DIR = machines
        settings.CLUSTER_SELF_RESCHEDULE = False
        # The network test that follows ready runs in this process under eager Celery: it
        # would be timed as part of the create.
        settings.NETWORK_TEST_AFTER_READY = False
        print(local.describe_mode())
        workspace = WorkspaceFactory(credit_balance=Decimal("1000000"))
        environment = workspace.default_environment
        environment.monthly_budget = Decimal("1000000")
        environment.save(update_fields=["monthly_budget"])
        cpus = os.cpu_count() or 1
        print(f"{'software':>8} | {'N':>2} | {'to ready':>8} | {'vs 2':>5} | control plane CPU | other CPU | "
              f"CPUs busy | outcome")
        print("-" * 98)
        block = 0
        for software in args.software.split(","):
            base = None
            for count in sizes:
                block += 1
                seconds, cpu, machine_cpu, outcome = one_run(environment, count, software, block)
                base = base or seconds
                busy = machine_cpu / (seconds * cpus)
                print(f"{software:>8} | {count:>2} | {seconds:7.1f}s | {seconds / base:4.1f}× | "
                      f"{cpu:16.1f}s | {machine_cpu - cpu:8.1f}s | {busy:8.0%} | {outcome}")
        leftover = [c.name for c in Cluster.objects.exclude(status=Status.TERMINATED)]
        if leftover:
            print(f"not terminated: {leftover}")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
