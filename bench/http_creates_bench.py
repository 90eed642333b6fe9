"""Creates over HTTP against the stack as `make run` ships it: `python -m config.stack` (the web
server, both Celery workers, beat and its embedded Redis) on a loopback port of its own, in a
database of its own, and 200 API creates (POST /api/v1/clusters) sent at once from as many
threads. Beside it, the in-process figure: the same 200 creates through Django's request
stack in one process (control_plane_bench's child), with no worker running.

The clusters' machines boot for an hour (simulated provider), so the worker has 200 booting
clusters to look after while the creates arrive: what it spends on them is CPU the web does
not get on this 2-CPU computer. Prints creates/s, p50/p95 latency and the answers by status;
asserts nothing.

    .venv/bin/python bench/http_creates_bench.py [--creates 200]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import _support
from control_plane_bench import PrivateRedis, free_port

GOAL_RATE, GOAL_P95 = 20.0, 5.0


def _workspace(count: int) -> tuple[str, int]:
    """A funded workspace, its API key and an offer with 2 × `count` hosts that boot for an hour."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from accounts.models import Environment, Membership, Role, Workspace
    from api.keys import create_api_key
    from offers import lab
    from offers.models import GPUModel, Host, Location, MachineType

    user = get_user_model().objects.create_user(f"http-bench-{time.time_ns()}", password="x")
    workspace = Workspace.objects.create(name=f"Bench {user.username}", credit_balance=Decimal("10000000"))
    Environment.objects.create(workspace=workspace, name="default", is_default=True, monthly_budget=Decimal("100000000"))
    Membership.objects.create(workspace=workspace, user=user, role=Role.OWNER)
    _, raw = create_api_key(workspace=workspace, created_by=user, name="bench")
    gpu, _ = GPUModel.objects.get_or_create(slug="H100", defaults={"name": "NVIDIA H100", "memory_gb": 80})
    location, _ = Location.objects.get_or_create(code="bench-1", defaults={"name": "Bench", "country": "US"})
    offer = MachineType.objects.create(gpu=gpu, location=location, kind="vm", gpus_per_machine=8, interconnect="eth_100g",
                                       price_per_machine_hour=Decimal("1.00"), provider="simulated")
    lab.inject(Host.objects.bulk_create([Host(machine_type=offer, name=f"{user.username}-{i}")
                              for i in range(count * 2)]), boot_seconds=3600)
    return raw, offer.pk


def _post(port: int, key: str, body: dict) -> tuple[int, float]:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", "/api/v1/clusters", json.dumps(body),
                           {"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException):
        status = 0  # refused or cut off: counted apart from the answers
    finally:
        connection.close()
    return status, time.monotonic() - started


def stack_cpu(session: int) -> dict[str, float]:
    """CPU seconds used so far by the stack's processes (its session), by role: web, worker
    (cluster work), webhooks, beat, redis."""
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if int(fields[3]) != session:  # the session id, after the state, ppid and pgrp
            continue
        role = ("web" if "config.serve" in command else "webhooks" if "-Q webhooks" in command
                else "worker" if " worker " in command else "beat" if " beat " in command
                else "redis" if "redis" in command else "stack")
        used[role] = used.get(role, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return used


def _cpu_share(before: dict[str, float], after: dict[str, float], seconds: float) -> str:
    return ", ".join(f"{role} {(after.get(role, 0) - before.get(role, 0)) / seconds:.2f}"
                     for role in ("web", "worker", "beat") if role in after)


def _answers(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        connection.request("GET", "/login/")
        return connection.getresponse().status == 200
    except OSError:
        return False


def creates_over_http(port: int, key: str, offer_id: int, count: int) -> dict:
    results: list[tuple[int, float]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(count + 1)

    def one(i: int) -> None:
        barrier.wait()
        result = _post(port, key, {"name": f"h-{i}", "offer_id": offer_id, "machines": 2})
        with lock:
            results.append(result)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    started = time.monotonic()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - started
    latencies = [latency for _, latency in results]
    statuses = [status for status, _ in results]
    by_status: dict[str, int] = {}
    for status in statuses:
        by_status[str(status)] = by_status.get(str(status), 0) + 1
    return {"seconds": seconds, "created": statuses.count(201), "p50": _support.percentile(latencies, 0.5),
            "p95": _support.percentile(latencies, 0.95), "503": statuses.count(503),
            "5xx": sum(1 for s in statuses if s >= 500), "statuses": by_status}


def run_stack(tmp: Path, database_url: str, port: int) -> subprocess.Popen:
    env = {key: value for key, value in os.environ.items() if key not in ("REDIS_URL", "DB_POOL_SIZE", "DB_POOL_TIMEOUT")}
    # As `make run` starts it (DEBUG=1, its embedded Redis), in this bench's database and folder.
    env.update(DATABASE_URL=database_url, DEBUG="1", RUNCRATE_VAR_DIR=str(tmp / "var"), DEFAULT_PROVIDER="simulated",
               LOG_LEVEL="WARNING", PYTHONUNBUFFERED="1")
    return subprocess.Popen([sys.executable, "-m", "config.stack", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=_support.ROOT, env=env, stdout=(tmp / "stack.log").open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def in_process(database_url: str, count: int) -> dict:
    """control_plane_bench's child: `count` creates through Django's stack in one process."""
    redis = PrivateRedis()
    try:
        env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis.url, "LOG_LEVEL": "CRITICAL",
               "CELERY_TASK_ALWAYS_EAGER": "0"}
        out = subprocess.run([sys.executable, str(_support.ROOT / "bench" / "control_plane_bench.py"),
                              "--creates-child", str(count)], cwd=_support.ROOT, env=env, capture_output=True, text=True)
    finally:
        redis.stop()
    if out.returncode:
        return {"error": out.stderr[-300:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--creates", type=int, default=200)
    args = parser.parse_args()
    _support.setup_django()
    from django.db import connection

    with _support.own_database("http") as database_url, tempfile.TemporaryDirectory(prefix="runcrate-http-") as tmp:
        key, offer_id = _workspace(args.creates)
        connection.close()
        inside = in_process(database_url, args.creates)
        port = free_port()
        stack = run_stack(Path(tmp), database_url, port)
        try:
            deadline = time.monotonic() + 120
            while not _answers(port) and time.monotonic() < deadline and stack.poll() is None:
                time.sleep(0.5)
            time.sleep(3)  # the workers and beat finish starting
            before = stack_cpu(stack.pid)
            row = creates_over_http(port, key, offer_id, args.creates)
            during = stack_cpu(stack.pid)
            # What the stack spends on the booting clusters once the creates are in (their first
            # passes done).
            time.sleep(20)
            settled = stack_cpu(stack.pid)
            time.sleep(20)
            after = stack_cpu(stack.pid)
        finally:
            os.killpg(stack.pid, signal.SIGINT)
            try:
                stack.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(stack.pid, signal.SIGKILL)
                stack.wait()
    rate = row["created"] / row["seconds"] if row["seconds"] else 0.0
    inside_rate = inside["created"] / inside["seconds"] if inside.get("seconds") else 0.0
    print(f"{args.creates} concurrent creates over HTTP against the stack (web + workers + beat), "
          f"machines booting for an hour")
    print(_support.table([
        ("creates/s over HTTP", f"{rate:.1f}/s ({row['created']} × 201 in {row['seconds']:.1f} s); "
                                f"in-process {inside_rate:.1f}/s", f"≥ {GOAL_RATE:.0f}/s", rate >= GOAL_RATE),
        ("latency over HTTP", f"p50 {row['p50']:.2f} s, p95 {row['p95']:.2f} s", f"p95 ≤ {GOAL_P95:.0f} s",
         row["p95"] <= GOAL_P95),
        ("503 / 5xx answers", f"{row['503']} / {row['5xx']} of {args.creates} {row['statuses']}", "0 / 0",
         row["5xx"] == 0),
        ("the stack's CPU during the creates", _cpu_share(before, during, row["seconds"]) + " CPUs", "", True),
        (f"the stack's CPU with {args.creates} clusters booting (20–40 s after)",
         _cpu_share(settled, after, 20) + " CPUs", "", True),
    ]))
    if "error" in inside:
        print(f"in-process creates failed: {inside['error']}")


if __name__ == "__main__":
    main()
