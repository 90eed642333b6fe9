"""The control plane under load: concurrent creates against a 100-connection PostgreSQL, and
how soon a terminate that arrives during a running pass is acted on. Prints figures; asserts
nothing (docs/bench.md keeps the last run's).

- creates/s: a private PostgreSQL (initdb in a temporary directory, max_connections=100, a
  port of its own, run as the `postgres` user when this runs as root) and a private
  redis-server; 50 and 200 API creates (POST /api/v1/clusters through Django's whole request
  stack: middleware, django-ninja, services) issued at once from as many threads, as a
  threaded server would, with the connection pool (DB_POOL_SIZE) and without it. Reports
  creates/s, the answers by status, and the most connections PostgreSQL saw at once.
- wake-up: a pass holds the lease through a 2-second join (the simulated provider's
  SIMULATED_JOIN_WORK_SECONDS); a terminate arrives mid-join, with no beat and no
  self-rescheduling. Reports how long after the join ended the cluster was terminated.

    .venv/bin/python bench/control_plane_bench.py [--rows creates,wakeup]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")


COUNTS = [int(n) for n in os.environ.get("BENCH_CREATES", "50,200").split(",")]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PrivatePostgres:
    """initdb + pg_ctl in a temporary directory, loopback only, trust auth."""

    def __init__(self, directory: Path, max_connections: int = 100) -> None:
        self.port = free_port()
        self.data = directory / "pgdata"
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(directory, "postgres")
        self._run([str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(directory / "pg.log"), "-w", "-o",
                   f"-c listen_addresses=127.0.0.1 -c port={self.port} -c max_connections={max_connections} "
                   f"-c unix_socket_directories={directory} -c fsync=off", "start"])
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/bench"
        self.psql("CREATE DATABASE bench", database="postgres")

    def _run(self, command: list[str]) -> None:
        subprocess.run(self.as_user + command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def psql(self, sql: str, database: str = "bench") -> str:
        return subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", database, "-Atc", sql],
            check=True, capture_output=True, text=True,
        ).stdout.strip()

    def stop(self) -> None:
        subprocess.run(self.as_user + [str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class PrivateRedis:
    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""],
                                        stdout=subprocess.DEVNULL)
        time.sleep(0.3)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait()


def _setup_django(env: dict[str, str]) -> None:
    os.environ.update(env)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("DEBUG", "1")
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


# -- creates ----------------------------------------------------------------------------------


def creates_child(count: int) -> dict:
    """Runs in a process of its own (settings are per process): `count` creates at once."""
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from accounts.models import Environment, Membership, Role, Workspace
    from api.keys import create_api_key
    from offers import lab
    from offers.models import GPUModel, Host, Location, MachineType

    user = get_user_model().objects.create_user(f"bench-{count}-{time.time_ns()}", password="x")
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
    connection.close()

    statuses: list[int] = []
    first_refusal: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(count)

    def one(i: int) -> None:
        client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {raw}", HTTP_HOST="127.0.0.1")
        barrier.wait()
        response = client.post("/api/v1/clusters", {"name": f"c-{i}", "offer_id": offer.pk, "machines": 2},
                               content_type="application/json")
        if response.status_code == 503:
            assert response.headers.get("Retry-After"), "a 503 without Retry-After"
        elif response.status_code != 201 and not first_refusal:
            first_refusal.append(response.content.decode()[:300])
        with lock:
            statuses.append(response.status_code)
        connection.close()

    # The first request imports the URLconf and the API: not what is measured.
    Client(HTTP_AUTHORIZATION=f"Bearer {raw}", HTTP_HOST="127.0.0.1").get("/api/v1/clusters")
    connection.close()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    started = time.monotonic()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - started
    by_status: dict[str, int] = {}
    for code in statuses:
        by_status[str(code)] = by_status.get(str(code), 0) + 1
    return {"seconds": elapsed, "created": statuses.count(201), "statuses": by_status, "refusal": first_refusal}


def bench_creates(tmp: Path) -> list[dict]:
    postgres = PrivatePostgres(tmp)
    redis = PrivateRedis()
    rows = []
    try:
        env = {"DATABASE_URL": postgres.url, "REDIS_URL": redis.url, "API_RATE_LIMIT": "0", "LOG_LEVEL": "CRITICAL", "DEBUG": "1",
               "CELERY_TASK_ALWAYS_EAGER": "0", "RUNCRATE_VAR_DIR": str(tmp / "var")}
        subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env={**os.environ, **env},
                       check=True, stdout=subprocess.DEVNULL)
        shipped = {key: value for key, value in os.environ.items() if not key.startswith("DB_POOL_")}
        for label, pool in [("shipped defaults", {}),
                            ("pool of 20", {"DB_POOL_SIZE": "20", "DB_POOL_TIMEOUT": "30"}),
                            ("pool of 20, 1 s timeout", {"DB_POOL_SIZE": "20", "DB_POOL_TIMEOUT": "1"}),
                            ("no pool", {"DB_POOL_SIZE": "0"})]:
            for count in COUNTS:
                peak = {"n": 0, "refused": 0}
                stop = threading.Event()

                def watch() -> None:
                    while not stop.is_set():
                        try:
                            n = int(postgres.psql("SELECT count(*) FROM pg_stat_activity WHERE datname = 'bench'"))
                            peak["n"] = max(peak["n"], n - 1)  # less this probe's own
                        except subprocess.CalledProcessError:
                            # The server is full: the probe is refused too, which the row reports.
                            peak["refused"] += 1
                        time.sleep(0.05)

                watcher = threading.Thread(target=watch)
                watcher.start()
                out = subprocess.run(
                    [sys.executable, __file__, "--creates-child", str(count)], cwd=ROOT,
                    # "shipped defaults": no DB_POOL_* at all, the pool config/settings.py ships.
                    env={**shipped, **env, **pool}, capture_output=True, text=True,
                )
                stop.set()
                watcher.join()
                if out.returncode:
                    rows.append({"setup": label, "count": count, "error": out.stderr[-500:]})
                    continue
                result = json.loads(out.stdout.strip().splitlines()[-1])
                result.update(setup=label, count=count, peak_connections=peak["n"], probes_refused=peak["refused"])
                rows.append(result)
    finally:
        redis.stop()
        postgres.stop()
    return rows


# -- wake-up ---------------------------------------------------------------------------------


def bench_wakeup(runs: int = 5, join_seconds: float = 2.0) -> list[float]:
    from datetime import timedelta
    from decimal import Decimal

    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from accounts.models import Environment, Workspace
    from clusters import lifecycle
    from clusters.models import Cluster, Node, Status
    from clusters.services.create import create_cluster
    from clusters.services.terminate import terminate_cluster
    from offers import lab
    from offers.models import GPUModel, Host, Location, MachineType

    settings.SIMULATED_JOIN_WORK_SECONDS = join_seconds
    settings.CLUSTER_SELF_RESCHEDULE = False
    workspace = Workspace.objects.create(name=f"Wake {time.time_ns()}", credit_balance=Decimal("100000"))
    environment = Environment.objects.create(workspace=workspace, name="default", is_default=True,
                                             monthly_budget=Decimal("1000000"))
    gpu, _ = GPUModel.objects.get_or_create(slug="H100", defaults={"name": "NVIDIA H100", "memory_gb": 80})
    location, _ = Location.objects.get_or_create(code="bench-1", defaults={"name": "Bench", "country": "US"})
    offer = MachineType.objects.create(gpu=gpu, location=location, kind="vm", gpus_per_machine=8, interconnect="eth_100g",
                                       price_per_machine_hour=Decimal("1.00"), provider="simulated")
    latencies = []
    for run in range(runs):
        lab.inject(Host.objects.bulk_create([Host(machine_type=offer, name=f"wake-{time.time_ns()}-{i}")
                                  for i in range(2)]), boot_seconds=3600)
        cluster = create_cluster(environment=environment, name=f"wake-{run}", machine_type=offer, machine_count=2)
        Node.objects.filter(cluster=cluster).update(boot_requested_at=timezone.now() - timedelta(hours=2))

        def holder() -> None:
            try:
                lifecycle.advance(cluster.pk)
            finally:
                connection.close()

        thread = threading.Thread(target=holder)
        thread.start()
        while not Node.objects.filter(cluster=cluster, state=Node.State.UP).exists():
            time.sleep(0.01)
        join_started = time.monotonic()
        terminate_cluster(Cluster.objects.get(pk=cluster.pk))
        while Cluster.objects.get(pk=cluster.pk).status != Status.TERMINATED:
            if time.monotonic() - join_started > 60:
                break
            time.sleep(0.01)
        latencies.append(max(0.0, time.monotonic() - join_started - join_seconds))
        thread.join()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", default="creates,wakeup")
    parser.add_argument("--creates-child", type=int)
    args = parser.parse_args()
    if args.creates_child:
        _setup_django({})
        print(json.dumps(creates_child(args.creates_child)))
        return
    rows = args.rows.split(",")
    if "creates" in rows:
        if not PG_BIN.exists():
            print(f"creates: skipped, {PG_BIN} is missing")
        else:
            with tempfile.TemporaryDirectory(prefix="runcrate-bench-") as tmp:
                os.chmod(tmp, 0o755)
                print("200 concurrent creates against PostgreSQL with max_connections=100 (API, one thread each)")
                print(f"{'setup':26} {'creates':>7} {'seconds':>8} {'creates/s':>9} {'peak conns':>10}  answers")
                for row in bench_creates(Path(tmp)):
                    if "error" in row:
                        print(f"{row['setup']:26} {row['count']:>7}  failed: {row['error']}")
                        continue
                    rate = row["created"] / row["seconds"] if row["seconds"] else 0
                    full = f" (server full: {row['probes_refused']} probes refused)" if row["probes_refused"] else ""
                    print(f"{row['setup']:26} {row['count']:>7} {row['seconds']:>8.2f} {rate:>9.1f} "
                          f"{row['peak_connections']:>10}{full}  {row['statuses']} {''.join(row['refusal'])}")
    if "wakeup" in rows:
        if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
            print("wake-up: skipped, needs PostgreSQL (DATABASE_URL)")
        else:
            # The terminate's own pass runs inline (it is what finds the lease held and leaves the mark).
            os.environ["CELERY_TASK_ALWAYS_EAGER"] = "1"
            os.environ.setdefault("LOG_LEVEL", "WARNING")  # not a line per eager task
            sys.path.insert(0, str(ROOT / "bench"))
            from _support import own_database, setup_django

            setup_django()
            with own_database("wakeup"):
                latencies = bench_wakeup()
            print(f"terminate during a pass → terminated after the pass's join, beat stopped: "
                  f"p50 {statistics.median(latencies) * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms "
                  f"({len(latencies)} runs)")


if __name__ == "__main__":
    main()
