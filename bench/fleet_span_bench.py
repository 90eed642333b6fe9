"""Create → ready for 6 machines over 3 lab hosts, beside 6 machines on one lab host (Slurm):
what spanning hosts costs (docs/nodeops.md "A cluster spans hosts").

Lab hosts (bin/lab-hosts, in a folder of this run's own, taken down at the end) are onboarded
with `manage.py hosts add`: lab-1 with 6 machines of one type, lab-2, lab-3 and lab-4 with 2
each of another. Each run creates a cluster with `services.create_cluster` and drives it with
`lifecycle.advance` as a worker does, then terminates it. Prints, per layout, the time to
ready (median of --runs), its ratio to the one-host layout, and the control plane's CPU per
node (this process: SSH sessions to the hosts and nodes, crypto, queries). Needs root and
real nodes; asserts nothing.

    DATABASE_URL=postgres://… .venv/bin/python bench/fleet_span_bench.py [--runs 1]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")
os.environ.setdefault("LOG_LEVEL", "CRITICAL")
import logging

import _support

_support.setup_django()
# Polling a machine's sshd before it is up makes paramiko log a traceback per try.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.urls import reverse  # noqa: E402

from clusters import lifecycle  # noqa: E402
from clusters.models import Status  # noqa: E402
from clusters.providers.local import provider as local  # noqa: E402
from clusters.services.create import create_cluster  # noqa: E402
from clusters.services.terminate import terminate_cluster  # noqa: E402
from tests.factories import MachineTypeFactory, WorkspaceFactory  # noqa: E402

LAB_HOSTS = Path(__file__).resolve().parents[1] / "bin" / "lab-hosts"
SETTLED = {Status.READY, Status.DEGRADED, Status.FAILED}
LAYOUTS = (("6 on one host", {"lab-1": 6}), ("6 over 3 hosts", {"lab-2": 2, "lab-3": 2, "lab-4": 2}))


def lab(lab_dir: str, *args: str) -> str:
    done = subprocess.run([str(LAB_HOSTS), *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, "RUNCRATE_LAB_DIR": lab_dir})
    if done.returncode != 0:
        raise SystemExit(f"lab-hosts {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def one_run(environment, machine_type, name: str) -> tuple[float, float, str]:
    started, cpu = time.monotonic(), time.process_time()
    cluster = create_cluster(environment=environment, name=name, machine_type=machine_type, machine_count=6,
                             software="slurm")
    while True:
        again = lifecycle.advance(cluster.pk)
        cluster.refresh_from_db()
        if cluster.status in SETTLED or time.monotonic() > started + 600:
            break
        if not again:
            time.sleep(0.05)
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    outcome = cluster.status
    if outcome != Status.READY:
        said = list(cluster.events.order_by("-id").values_list("message", flat=True)[:3])
        outcome += " (" + " / ".join(reversed(said)) + ")"
    terminate_cluster(cluster)
    deadline = time.monotonic() + 120
    while cluster.status != Status.TERMINATED and time.monotonic() < deadline:
        lifecycle.advance(cluster.pk)
        cluster.refresh_from_db()
        time.sleep(0.1)
    return seconds, cpu, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    if os.geteuid() != 0 or local.mode()[0] != "namespaces":
        print(f"skipped: lab hosts and real nodes need root and namespaces ({local.mode()[1]})")
        return
    with _support.own_database("span"), tempfile.TemporaryDirectory(prefix="rc-span-") as folder:
        lab_dir, machines = f"{folder}/lab", f"{folder}/machines"
        settings.LOCAL_MACHINES_DIR = machines
        settings.LOCAL_NODES = "namespaces"
        settings.CLUSTER_SELF_RESCHEDULE = False
        settings.NETWORK_TEST_AFTER_READY = False
        reverse("clusters:list")
        workspace = WorkspaceFactory(credit_balance=Decimal("1000000"))
        environment = workspace.default_environment
        environment.monthly_budget = Decimal("1000000")
        environment.save(update_fields=["monthly_budget"])
        try:
            lab(lab_dir, "up", "4")
            hosts = {h["name"]: h for h in json.loads(lab(lab_dir, "list", "--json"))}
            print(local.describe_mode())
            print(f"{'layout':>15} | {'to ready':>8} | {'vs one host':>11} | control plane CPU per node | outcome")
            print("-" * 80)
            base = None
            for block, (label, layout) in enumerate(LAYOUTS):
                machine_type = MachineTypeFactory(provider="local", kind="vm", gpus_per_machine=1, disk_gb=100,
                                                  price_per_machine_hour=Decimal("1.00"))
                for name, count in layout.items():
                    host = hosts[name]
                    call_command("hosts", "add", host["address"], "--port", str(host["port"]), "--ssh-key",
                                 host["ssh_key"], "--machine-type", str(machine_type.pk), "--machines", str(count),
                                 stdout=io.StringIO())
                runs = [one_run(environment, machine_type, f"span-{block}-{i}") for i in range(args.runs)]
                seconds = _support.median([r[0] for r in runs])
                cpu = _support.median([r[1] for r in runs])
                base = base or seconds
                print(f"{label:>15} | {seconds:7.1f}s | {seconds / base:10.2f}× | {cpu / 6 * 1000:23.0f} ms | "
                      f"{', '.join(r[2] for r in runs)}")
        finally:
            lab(lab_dir, "down")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
