"""The control plane at scale (issues 13, 22 and 38): pages at 10 vs 1,000 (--large) clusters, live pushes at
6 vs 5,000 events, and node pushes at 8 and 64 machines, each row measured in this one run.

    DATABASE_URL=postgres://… REDIS_URL=redis://… .venv/bin/python bench/scale_bench.py [--repeat 25] [--pushes 40] [--only-pushes]

Pages: two workspaces in one database, one with 10 clusters × 8 machines and one with 1,000,
every machine running and metered; each page is fetched --repeat times (after a warm-up)
through Django's full request stack, and the median is compared.

Pushes: the real ASGI server (uvicorn, config.serve) in its own process, the Redis channel layer, and a
real WebSocket client (the `websockets` library) on the cluster page's socket. The clock
starts before the service call that changes the status (retry install ↔ degraded, each one
transaction with its live push queued on commit) and stops when the client holds the
fragment showing the new status. Two clusters of 8 machines: one with 6 events, one with
5,000. Node pushes: clusters of 8 and 64 installing machines, each with a 4,000-character
log; 1 node or every node changes in one service call (their rows' words, update_nodes, or
a new log line each, append_node_logs), and a status change that every row follows (retry
install ↔ degraded); bytes are every message of the push. Figures printed here are what
docs/scale.md quotes; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import queue
import socket
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("API_RATE_LIMIT", "0")
import _support

_support.setup_django()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.models import Role  # noqa: E402
from api.keys import create_api_key  # noqa: E402
from billing import services as billing  # noqa: E402
from billing.models import MachineUsage  # noqa: E402
from billing.months import month_start  # noqa: E402
from clusters.models import Cluster, ClusterEvent, Node, Software, Status  # noqa: E402
from clusters.services.progress import append_node_logs, mark_degraded, retry_install, update_nodes  # noqa: E402
from config.celery import app as celery_app  # noqa: E402
from offers.models import Host  # noqa: E402
from tests.factories import HostFactory, MachineTypeFactory, MembershipFactory, UserFactory, WorkspaceFactory  # noqa: E402

MACHINES = 8
LOG_TAIL = "".join(f"[12:00:{i % 60:02d}] install: a line of installer output, number {i}\n" for i in range(80))[-4000:]
PAGE_GOAL = 1.5
PUSH_GOAL_MS = 100.0
WEB_LOG = Path(os.environ.get("TMPDIR", "/tmp")) / f"scale-bench-web-{os.getpid()}.log"
SERVICE_MS: list[float] = []  # of each timed push, the part spent in the service call itself


def build_workspace(name: str, clusters: int, machine_type, started: dt.datetime, machines: int = MACHINES):
    """A workspace with `clusters` running clusters of `machines` machines, each with events and usage."""
    owner = UserFactory(username=name)
    membership = MembershipFactory(user=owner, role=Role.OWNER, workspace=WorkspaceFactory(name=name, credit_balance=Decimal("10000000")))
    workspace = membership.workspace
    environment = workspace.default_environment
    environment.monthly_budget = Decimal("10000000")
    environment.save(update_fields=["monthly_budget"])
    hosts = Host.objects.bulk_create(
        HostFactory.build(machine_type=machine_type, state=Host.State.RESERVED, name=f"{name}-{i}") for i in range(clusters * machines)
    )
    made = Cluster.objects.bulk_create(
        Cluster(
            workspace=workspace, environment=environment, name=f"{name}-{i}", machine_type=machine_type,
            machine_count=machines, price_per_machine_hour=Decimal("2.4900"), provider="simulated", status=Status.READY,
            software=Software.SLURM, status_changed_at=started, deadline_at=started, billing_started_at=started,
            ready_at=started, node_secrets={"wireguard": "x" * 400},
        )
        for i in range(clusters)
    )
    nodes = Node.objects.bulk_create(
        Node(cluster=cluster, index=i, host=hosts[c * machines + i], state=Node.State.READY, address=f"127.0.0.1:{2200 + i}",
             billing_started_at=started, joined_at=started, step="ready", log_tail=LOG_TAIL, log_written=len(LOG_TAIL))
        for c, cluster in enumerate(made)
        for i in range(machines)
    )
    MachineUsage.objects.bulk_create(
        (MachineUsage(node=node, cluster_id=node.cluster_id, workspace=workspace, environment=environment,
                      rate=Decimal("2.4900"), started_at=started, billed_until=started) for node in nodes),
        batch_size=2000,
    )
    # What start_usage does after opening intervals: the burn rate and the month of each line.
    billing.refresh_usage_rate(workspace.pk)
    billing.record_usage_months((cluster.pk, workspace.pk, environment.pk, month_start(started)) for cluster in made)
    ClusterEvent.objects.bulk_create(
        ClusterEvent(cluster=cluster, actor="system", event=event, message=f"{cluster.name}: {event}")
        for cluster in made
        for event in ("created", "joined", "ready")
    )
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(owner)
    key = create_api_key(workspace=workspace, created_by=owner, name="bench")[1]
    return {"workspace": workspace, "client": client, "key": key, "owner": owner, "clusters": made}


def get(client: Client, url: str, headers: dict) -> tuple[float, int]:
    started = time.perf_counter()
    response = client.get(url, **headers)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return elapsed, len(response.content)


def bench_pages(small: dict, large: dict, repeat: int, counts: str) -> list[tuple[str, str, str, bool]]:
    """Each page at both sizes, requests interleaved (small, large, small, …) so that whatever
    else loads the machine weighs on both sides of the ratio alike."""
    pages = [
        ("`GET /clusters/`", "/clusters/", False),
        ("`GET /billing/`", "/billing/", False),
        ("`GET /api/v1/billing/usage` (50 a page)", "/api/v1/billing/usage?limit=50", True),
    ]
    rows = []
    for label, url, api in pages:
        sides = []
        for data in (small, large):
            client = Client(HTTP_HOST="127.0.0.1") if api else data["client"]
            headers = {"HTTP_AUTHORIZATION": f"Bearer {data['key']}"} if api else {}
            sides.append((client, headers))
        samples: list[list[float]] = [[], []]
        sizes = [0, 0]
        for round_ in range(repeat + 2):
            for side, (client, headers) in enumerate(sides):
                elapsed, sizes[side] = get(client, url, headers)
                if round_ >= 2:  # two warm-up rounds
                    samples[side].append(elapsed)
        t10, t1000 = (_support.median(s) for s in samples)
        ratio = t1000 / t10
        rows.append((
            f"{label}, {counts} clusters",
            f"{t1000 * 1000:.0f} ms vs {t10 * 1000:.0f} ms ({ratio:.2f}×), {sizes[1] / 1024:.0f} KB vs {sizes[0] / 1024:.0f} KB",
            f"≤ {PAGE_GOAL}×", ratio <= PAGE_GOAL,
        ))
    return rows


# --- pushes ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_web(database_url: str, port: int) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": database_url, "DEBUG": "1", "CHANNEL_PREFIX": os.environ["CHANNEL_PREFIX"]}
    # Its log goes to a file: an unread pipe fills up and stops the server mid-bench.
    log = open(WEB_LOG, "wb")  # noqa: SIM115 - closed with the process
    process = subprocess.Popen(
        [sys.executable, "-m", "config.serve", "--host", "127.0.0.1", "--port", str(port)],
        cwd=_support.ROOT, env=env, stdout=log, stderr=log, start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return process
        if process.poll() is not None:
            said = WEB_LOG.read_text(errors="replace")[-2000:]
            WEB_LOG.unlink(missing_ok=True)
            raise SystemExit("the web server exited: " + said)
        time.sleep(0.2)
    raise SystemExit("the web server did not start within 30 s")


def stop_web(process: subprocess.Popen) -> None:
    """Stop the server and remove its log: the bench leaves nothing in the temporary folder."""
    try:
        os.killpg(process.pid, 15)
        process.wait(timeout=10)
    finally:
        WEB_LOG.unlink(missing_ok=True)


class Listener:
    """A WebSocket client on the cluster page's socket; every message is kept with its arrival time."""

    def __init__(self, port: int, cluster_id: int, cookie: str) -> None:
        from websockets.sync.client import connect

        self.socket = connect(
            f"ws://127.0.0.1:{port}/ws/clusters/{cluster_id}/",
            additional_headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": f"http://127.0.0.1:{port}"},
            max_size=None, open_timeout=10,
        )
        self.messages: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._receive, daemon=True).start()

    def _receive(self) -> None:
        try:
            for message in self.socket:
                self.messages.put((time.perf_counter(), message))
        except Exception:  # noqa: BLE001 - closed at the end of the bench
            pass

    def wait_for(self, needle: str, timeout: float = 10.0) -> tuple[float, int]:
        """Arrival time of the message containing `needle`, and the bytes of every message of
        the push: those before it and those that follow it at once (a push's node rows
        travel in a message of their own)."""
        deadline = time.monotonic() + timeout
        size = 0
        while True:
            arrived, message = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            size += len(message.encode())
            if needle in message:
                break
        while True:
            try:
                size += len(self.messages.get(timeout=0.15)[1].encode())
            except queue.Empty:
                return arrived, size

    def drain(self) -> None:
        time.sleep(0.2)
        while not self.messages.empty():
            self.messages.get_nowait()

    def close(self) -> None:
        self.socket.close()


def degrade_and_retry(cluster: Cluster, listener: Listener, pushes: int) -> tuple[list[float], list[int]]:
    """Status changes timed from the service call to the fragment on the socket."""
    latencies, sizes = [], []
    committed: list[float] = []
    for i in range(pushes):
        fresh = Cluster.objects.get(pk=cluster.pk)
        started = time.perf_counter()
        if fresh.status == Status.DEGRADED:
            retry_install(fresh, actor="bench")
            needle = 'data-testid="cluster-status">Installing<'
        else:
            mark_degraded(fresh, {"node-0": f"bench attempt {i}"})
            needle = 'data-testid="cluster-status">Degraded<'
        returned = time.perf_counter()
        arrived, size = listener.wait_for(needle)
        latencies.append((arrived - started) * 1000)
        committed.append((returned - started) * 1000)
        sizes.append(size)
    SERVICE_MS.extend(committed)
    return latencies, sizes


def bench_pushes(database_url: str, owner, clusters: list[Cluster], pushes: int) -> list[tuple[str, str, str, bool]]:
    # The retried install queues the reconciler; no worker runs in this bench, so the task
    # goes to an in-memory broker instead of piling up on Redis.
    celery_app.conf.broker_url = "memory://"
    celery_app.conf.task_always_eager = False
    short, long = clusters[0], clusters[1]
    ClusterEvent.objects.filter(cluster=short).delete()
    ClusterEvent.objects.bulk_create(ClusterEvent(cluster=short, actor="system", event="note", message=f"event {i}") for i in range(6))
    ClusterEvent.objects.bulk_create(
        (ClusterEvent(cluster=long, actor="system", event="note", message=f"event {i} of a long history") for i in range(4997)),
        batch_size=2000,
    )
    Cluster.objects.filter(pk__in=[short.pk, long.pk]).update(status=Status.DEGRADED)
    client = Client(HTTP_HOST="127.0.0.1")
    client.force_login(owner)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    port = free_port()
    web = start_web(database_url, port)
    results = {}
    try:
        for name, cluster in (("6", short), ("5000", long)):
            listener = Listener(port, cluster.pk, cookie)
            listener.wait_for('id="status-card"')  # the state on joining
            listener.drain()
            degrade_and_retry(cluster, listener, 4)  # warm-up: templates, connections
            listener.drain()
            results[name] = degrade_and_retry(cluster, listener, pushes)
            listener.close()
    finally:
        stop_web(web)
    connection.close()
    p50 = {k: _support.percentile(v[0], 0.5) for k, v in results.items()}
    p95 = {k: _support.percentile(v[0], 0.95) for k, v in results.items()}
    bytes_ = {k: max(v[1]) for k, v in results.items()}
    size_ratio = bytes_["5000"] / bytes_["6"]
    return [(
        "status change → fragment on the socket (8 machines), 6 vs 5,000 events",
        f"p50 {p50['6']:.0f} / {p50['5000']:.0f} ms, p95 {p95['6']:.0f} / {p95['5000']:.0f} ms; "
        f"{bytes_['6'] / 1024:.1f} KB / {bytes_['5000'] / 1024:.1f} KB a push ({size_ratio:.2f}×); "
        f"the service call itself p50 {_support.percentile(SERVICE_MS, 0.5):.0f} ms",
        f"p95 ≤ {PUSH_GOAL_MS:.0f} ms, size bounded",
        max(p95.values()) <= PUSH_GOAL_MS and size_ratio <= 1.1,
    )]


NODE_PUSH_GOAL_KB = 50
NODE_PUSH_GOAL_MS = 50.0


def change_nodes(cluster: Cluster, listener: Listener, kind: str, changing: int, pushes: int) -> tuple[list[float], list[int]]:
    """`changing` nodes change in one service call, timed to the fragment on the socket:
    `detail` (update_nodes: each row's words, as a progress pass writes them) or `log` (a new
    output line on each, append_node_logs, as an install streams it)."""
    nodes = list(Node.objects.filter(cluster=cluster).order_by("index")[:changing])
    latencies, sizes = [], []
    for i in range(pushes):
        last = nodes[-1]
        started = time.perf_counter()
        if kind == "detail":
            update_nodes(cluster.pk, [(node, {"detail": f"Bench pass {i} on {node.name}."}) for node in nodes])
            needle = f"Bench pass {i} on {last.name}."
        else:
            append_node_logs(cluster.pk, {node.pk: [("install", f"bench line {i} on {node.name}")] for node in nodes})
            needle = f"bench line {i} on {last.name}"
        SERVICE_MS.append((time.perf_counter() - started) * 1000)
        arrived, size = listener.wait_for(needle)
        latencies.append((arrived - started) * 1000)
        sizes.append(size)
    return latencies, sizes


def bench_node_pushes(database_url: str, machine_type, started: dt.datetime, pushes: int) -> list[tuple[str, str, str, bool]]:
    """Clusters of 8 and 64 installing machines (4,000-character logs): 1 or every node changes."""
    rows = []
    built = {machines: build_workspace(f"push{machines}", 1, machine_type, started, machines=machines) for machines in (8, 64)}
    for data in built.values():
        Cluster.objects.filter(pk=data["clusters"][0].pk).update(status=Status.INSTALLING)
        Node.objects.filter(cluster=data["clusters"][0]).update(state=Node.State.INSTALLING, step="install")
    port = free_port()
    web = start_web(database_url, port)
    try:
        for machines, data in built.items():
            cluster = data["clusters"][0]
            client = Client(HTTP_HOST="127.0.0.1")
            client.force_login(data["owner"])
            listener = Listener(port, cluster.pk, client.cookies[settings.SESSION_COOKIE_NAME].value)
            _, joined = listener.wait_for('id="status-card"')
            listener.drain()
            for kind in ("detail", "log"):
                for changing in sorted({1, machines}):
                    change_nodes(cluster, listener, kind, changing, 3)  # warm-up
                    SERVICE_MS.clear()
                    latencies, sizes = change_nodes(cluster, listener, kind, changing, pushes)
                    p50, p95 = _support.percentile(latencies, 0.5), _support.percentile(latencies, 0.95)
                    kb = max(sizes) / 1024
                    what = "their rows' words" if kind == "detail" else "a new log line each"
                    rows.append((
                        f"node push, {machines} machines, {changing} changing ({what})",
                        f"p50 {p50:.0f} ms, p95 {p95:.0f} ms, {kb:.1f} KB a push (joining: {joined / 1024:.0f} KB); "
                        f"the service call itself p50 {_support.percentile(SERVICE_MS, 0.5):.0f} ms",
                        f"≤ {NODE_PUSH_GOAL_KB} KB, p95 ≤ {NODE_PUSH_GOAL_MS:.0f} ms",
                        kb <= NODE_PUSH_GOAL_KB and p95 <= NODE_PUSH_GOAL_MS,
                    ))
            # A status change that every node follows (retry install ↔ degraded: 64 rows each time).
            Cluster.objects.filter(pk=cluster.pk).update(status=Status.DEGRADED)
            degrade_and_retry(cluster, listener, 3)
            SERVICE_MS.clear()
            latencies, sizes = degrade_and_retry(cluster, listener, pushes)
            p95 = _support.percentile(latencies, 0.95)
            rows.append((
                f"status change, {machines} machines (every node's row changes with it)",
                f"p50 {_support.percentile(latencies, 0.5):.0f} ms, p95 {p95:.0f} ms, {max(sizes) / 1024:.1f} KB a push; "
                f"the service call itself p50 {_support.percentile(SERVICE_MS, 0.5):.0f} ms",
                f"≤ {NODE_PUSH_GOAL_KB} KB, p95 ≤ {NODE_PUSH_GOAL_MS:.0f} ms",
                max(sizes) / 1024 <= NODE_PUSH_GOAL_KB and p95 <= NODE_PUSH_GOAL_MS,
            ))
            listener.close()
    finally:
        stop_web(web)
    connection.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30, help="requests per page and size (median)")
    parser.add_argument("--pushes", type=int, default=40, help="status changes per event count (0: pages only)")
    parser.add_argument("--only-pushes", action="store_true", help="the pushes alone, not the pages")
    parser.add_argument("--large", type=int, default=1000, help="clusters of the large workspace (10000: issue 38's size)")
    args = parser.parse_args()
    with _support.own_database("scale") as database_url:
        started = timezone.now().replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        if timezone.now() - started < dt.timedelta(hours=2):
            started = timezone.now() - dt.timedelta(hours=2)  # a run just after midnight on the 1st
        machine_type = MachineTypeFactory(price_per_machine_hour=Decimal("2.4900"))
        build = time.perf_counter()
        small = build_workspace("ten", 10, machine_type, started)
        if not args.only_pushes:
            large = build_workspace("large", args.large, machine_type, started)
            full = build_workspace("sixty", 60, machine_type, started)
        run = billing.meter_usage(timezone.now())
        # A database in use has its planner statistics and its tables' visibility maps
        # (autovacuum keeps both: it vacuums a table after inserts too, PostgreSQL 13+); one
        # built in bulk seconds ago has neither until autovacuum wakes, possibly in the middle
        # of a page. Without the visibility map the pager's count of live clusters cannot be
        # answered from the index (environment, status) alone and visits every cluster's row:
        # the part of the page that grew with 10,000 clusters (issue 38).
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        print(f"built {Cluster.objects.count():,} clusters, {run.machines} machines metered ({run.entries} ledger entries) "
              f"in {time.perf_counter() - build:.1f} s on {connection.vendor}; pages {args.repeat}× each, "
              f"{args.pushes} pushes per history")
        rows = []
        if not args.only_pushes:
            rows += bench_pages(small, large, args.repeat, counts=f"{args.large:,} vs 10")
            # At 10 clusters a page is not full (10 lines against 50 and 25): the same pages
            # with a full first page on both sides show what the workspace's size itself costs.
            rows += bench_pages(full, large, args.repeat, counts=f"{args.large:,} vs 60")
        if args.pushes <= 0:
            print("pushes not measured: --pushes 0")
        elif settings.CHANNEL_LAYERS["default"]["BACKEND"].endswith("RedisChannelLayer"):
            rows += bench_pushes(database_url, small["owner"], small["clusters"], args.pushes)
            rows += bench_node_pushes(database_url, machine_type, started, args.pushes)
        else:
            print("pushes not measured: set REDIS_URL (the web server and this process share the channel layer)")
    print(_support.table(rows))
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
