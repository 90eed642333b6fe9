"""Create → ready on the `local` provider, through the whole control plane, at 2, 8, 32 and 64
machines, beside the node work alone: the issue-13 row "create → ready, local, 32 vs 2
machines" and issue 22's "join at 64 within 1.2× of the nodes' own floor".

Each run creates a cluster with `services.create_cluster` (the service the API and the
dashboard call) and drives it with `lifecycle.advance`, as a worker does when a pass asks
to be looked at again: leases, heartbeats, node output, pushes and billing all run. The
machines are real Linux nodes in namespaces where this computer allows (else the loopback
sandboxes `make run` falls back to). Prints, per size and software, the time to ready, its
ratio to the first size, the CPU the control plane itself spent (this process: SSH sessions,
crypto, queries; on `local` also booting the machines: namespaces, cgroups, polling /proc for
each node's init) and that per machine, the CPU every other process used meanwhile (the nodes' own work: their
sshd sessions, scripts, wireguard-go, munge, slurmd; and whatever else runs), and how busy
that kept this computer's CPUs: near 100% means the work on the CPUs, not waiting, set the
time. Right after each run, the same boot, join, install and readiness driven directly
(`real_nodes_bench.one_run`: no database, no lifecycle, no pushes) on as many fresh real
machines, and the ratio of the two: what the control plane adds to the nodes' own floor.
Asserts nothing.

    DATABASE_URL=postgres://… .venv/bin/python bench/time_to_ready_bench.py [--sizes 2,8,32,64] [--software none,slurm] [--no-floor]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")
os.environ.setdefault("LOG_LEVEL", "CRITICAL")
import _support

_support.setup_django()

import real_nodes_bench  # noqa: E402
from django.conf import settings  # noqa: E402
from django.urls import reverse  # noqa: E402

from clusters import lifecycle  # noqa: E402
from clusters.models import Cluster, Status  # noqa: E402
from clusters.providers.local import provider as local  # noqa: E402
from clusters.services.create import create_cluster  # noqa: E402
from clusters.services.terminate import terminate_cluster  # noqa: E402
from offers.models import Host  # noqa: E402
from tests.factories import MachineTypeFactory, WorkspaceFactory  # noqa: E402

SETTLED = {Status.READY, Status.DEGRADED, Status.FAILED}
# Issue 22 and 38: create → ready through the control plane within this of the nodes' own floor.
FLOOR_GOAL = 1.2
BOOT_CPU = [0.0]  # CPU seconds this process spent in the local provider's machine boots
_boot_lock = threading.Lock()


def _count_boot_cpu() -> None:
    """The local provider asks this computer's host runtime to boot its machines (a program
    of its own, run as root: namespaces, cgroups, polling /proc until each node's init is up),
    as a cloud provider does on its side. What the asking costs this process is counted
    apart, per thread, so the control plane's own CPU per node can be read beside it."""
    boot = local.HostRuntimeProvider.boot_all

    def counted(self, nodes):
        started = time.thread_time()
        try:
            return boot(self, nodes)
        finally:
            with _boot_lock:
                BOOT_CPU[0] += time.thread_time() - started

    local.HostRuntimeProvider.boot_all = counted


def one_run(environment, count: int, software: str, block: int, image: str) -> tuple[float, float, float, float, str]:
    machine_type = MachineTypeFactory(provider="local", kind="vm", price_per_machine_hour=Decimal("1.00"))
    Host.objects.bulk_create(
        Host(machine_type=machine_type, name=f"ttr-{block}-{i}", address=f"127.76.{block}.{i + 1}", port=2222)
        for i in range(count)
    )
    BOOT_CPU[0] = 0.0
    started, cpu, machine_cpu = time.monotonic(), time.process_time(), _support.machine_cpu_seconds()
    cluster = create_cluster(environment=environment, name=f"ttr-{block}", machine_type=machine_type,
                                      machine_count=count, software=software, image=image)
    deadline = started + 300
    while True:
        again = lifecycle.advance(cluster.pk)
        cluster.refresh_from_db()
        if cluster.status in SETTLED or time.monotonic() > deadline:
            break
        if not again:
            time.sleep(0.05)
    seconds, cpu, boot_cpu = time.monotonic() - started, time.process_time() - cpu, BOOT_CPU[0]
    machine_cpu = _support.machine_cpu_seconds() - machine_cpu
    outcome = cluster.status
    stopping = time.monotonic()
    terminate_cluster(cluster)
    lifecycle.advance(cluster.pk)
    return seconds, cpu, boot_cpu, machine_cpu, f"{outcome}; terminated in {time.monotonic() - stopping:.1f}s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,8,32,64")
    parser.add_argument("--software", default="none,slurm")
    parser.add_argument("--image", default="pytorch", help="the machine image the clusters and the floor boot from")
    parser.add_argument("--no-floor", action="store_true", help="skip the node work driven without the control plane")
    args = parser.parse_args()
    floor = None if args.no_floor or local.mode()[0] != "namespaces" else real_nodes_bench.one_run
    sizes = [int(n) for n in args.sizes.split(",")]
    with _support.own_database("ready"), tempfile.TemporaryDirectory(prefix="rc-ttr-") as machines:
        settings.LOCAL_MACHINES_DIR = machines
        settings.CLUSTER_SELF_RESCHEDULE = False
        # The network test that follows ready runs in this process under eager Celery: it
        # would be timed as part of the create.
        settings.NETWORK_TEST_AFTER_READY = False
        print(local.describe_mode() + f"; machine image {args.image}")
        # What a worker pays once, at its first event's link (the URLconf: every view and the
        # API's schemas imported): ~1 s of CPU that would land on the first size's run only
        # and skew its control-plane CPU per node.
        reverse("clusters:list")
        workspace = WorkspaceFactory(credit_balance=Decimal("1000000"))
        environment = workspace.default_environment
        environment.monthly_budget = Decimal("1000000")
        environment.save(update_fields=["monthly_budget"])
        cpus = os.cpu_count() or 1
        _count_boot_cpu()
        print(f"{'software':>8} | {'N':>2} | {'to ready':>8} | {'vs 1st':>6} | control plane CPU (of it: boots) | "
              f"per node without boots | other CPU | CPUs busy | node floor | × floor (goal ≤ {FLOOR_GOAL}×) | outcome")
        print("-" * 124)
        block = 0
        for software in args.software.split(","):
            base = None
            for count in sizes:
                block += 1
                seconds, cpu, boot_cpu, machine_cpu, outcome = one_run(environment, count, software, block, args.image)
                base = base or seconds
                busy = machine_cpu / (seconds * cpus)
                alone, ratio = "—", "—"
                if floor is not None:
                    try:
                        floor_seconds = floor(count, software, Path(machines) / f"floor-{block}", args.image)[0]
                    except RuntimeError as error:
                        alone = f"failed: {error}"
                    else:
                        met = "met" if seconds / floor_seconds <= FLOOR_GOAL else "NOT met"
                        alone, ratio = f"{floor_seconds:.1f}s", f"{seconds / floor_seconds:.2f}× ({met})"
                print(f"{software:>8} | {count:>2} | {seconds:7.1f}s | {seconds / base:5.2f}× | "
                      f"{cpu:6.1f}s ({boot_cpu:4.1f}s) | {(cpu - boot_cpu) / count * 1000:5.0f} ms | "
                      f"{machine_cpu - cpu:8.1f}s | {busy:8.0%} | {alone:>10} | {ratio:>22} | {outcome}")
        leftover = [c.name for c in Cluster.objects.exclude(status=Status.TERMINATED)]
        if leftover:
            print(f"not terminated: {leftover}")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
