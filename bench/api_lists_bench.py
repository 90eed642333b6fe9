"""Every API list at 10, 1,000 and 10,000 clusters, and the clusters list at 8 vs 64 nodes a cluster.

    DATABASE_URL=postgres://… .venv/bin/python bench/api_lists_bench.py [--repeat 15] [--sizes 10,1000,10000]

One PostgreSQL database of its own (bench/_support.py); one workspace per size, each holding
that many running clusters of 8 machines (every node with its host and a log tail), and one
more with 50 clusters of 64 machines. Through Django's full request stack with an API key,
each list is fetched --repeat times after two warm-ups, sizes interleaved, and the median
time, the SQL queries and the bytes of one answer are printed:

- `GET /api/v1/clusters?status=all` (50 a page: each cluster with its unhealthy count and head ssh line);
- `GET /api/v1/instances` (50 a page);
- `GET /api/v1/clusters/{id}/events` of the newest cluster (50 a page, its history grows
  with the size: 3 events a cluster of the workspace, at most 5,000);
- `GET /api/v1/clusters/{id}/network-tests` of the newest cluster (20 tests of 8 nodes).

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("API_RATE_LIMIT", "0")
import _support

_support.setup_django()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.models import Role  # noqa: E402
from api.keys import create_api_key  # noqa: E402
from clusters.models import Cluster, ClusterEvent, NetworkTest, NetworkTestPair, Node, NodeHealth, Software, Status  # noqa: E402
from offers.models import Host  # noqa: E402
from tests.factories import HostFactory, MachineTypeFactory, MembershipFactory, UserFactory, WorkspaceFactory  # noqa: E402

LOG_TAIL = "".join(f"[12:00:{i % 60:02d}] install: a line of installer output, number {i}\n" for i in range(80))[-4000:]
BATCH = 5000


def build(name: str, clusters: int, machines: int, machine_type, started: dt.datetime) -> dict:
    owner = UserFactory(username=name)
    workspace = MembershipFactory(user=owner, role=Role.OWNER, workspace=WorkspaceFactory(name=name)).workspace
    environment = workspace.default_environment
    hosts = Host.objects.bulk_create(
        (HostFactory.build(machine_type=machine_type, state=Host.State.RESERVED, name=f"{name}-{i}")
         for i in range(clusters * machines)), batch_size=BATCH,
    )
    made = Cluster.objects.bulk_create(
        (Cluster(workspace=workspace, environment=environment, name=f"{name}-{i}", machine_type=machine_type,
                 machine_count=machines, price_per_machine_hour=Decimal("2.4900"), provider="simulated",
                 status=Status.READY, software=Software.SLURM, status_changed_at=started, deadline_at=started,
                 billing_started_at=started, ready_at=started, node_secrets={"wireguard": "x" * 400})
         for i in range(clusters)), batch_size=BATCH,
    )
    Node.objects.bulk_create(
        (Node(cluster=cluster, index=i, host=hosts[c * machines + i], state=Node.State.READY, step="ready",
              billing_started_at=started, joined_at=started, log_tail=LOG_TAIL, log_written=len(LOG_TAIL), health=NodeHealth.HEALTHY,
              health_detail=f"reaches {machines - 1} peers over wg0; slurmd running; idle in sinfo",
              health_checked_at=started, health_changed_at=started)
         for c, cluster in enumerate(made) for i in range(machines)), batch_size=BATCH,
    )
    newest = made[-1]
    ClusterEvent.objects.bulk_create(
        (ClusterEvent(cluster=newest, actor="system", event="note", message=f"{newest.name}: event {i}")
         for i in range(min(3 * clusters, 5000))), batch_size=BATCH,
    )
    for _ in range(20):
        test = NetworkTest.objects.create(cluster=newest, trigger="on_demand", expected_gbps=1.0, status="passed",
                                          node_names=[f"node-{i}" for i in range(8)])
        NetworkTestPair.objects.bulk_create(
            NetworkTestPair(test=test, phase="pairs", source_index=a, target_index=b, gbps=1.5, latency_ms=0.2)
            for a in range(8) for b in range(8) if a != b
        )
    key = create_api_key(workspace=workspace, created_by=owner, name="bench")[1]
    return {"key": key, "newest": newest.pk}


def fetch(client: Client, url: str, key: str) -> tuple[float, int, int]:
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {key}")
        elapsed = time.perf_counter() - started
    assert response.status_code == 200, (url, response.status_code, response.content[:300])
    return elapsed, len(queries.captured_queries), len(response.content)


def measure(sides: list[tuple[str, dict]], url_of, repeat: int) -> list[tuple[str, float, int, int]]:
    client = Client(HTTP_HOST="127.0.0.1")
    samples: dict[str, list[float]] = {label: [] for label, _ in sides}
    shape: dict[str, tuple[int, int]] = {}
    for round_ in range(repeat + 2):
        for label, data in sides:
            elapsed, queries, size = fetch(client, url_of(data), data["key"])
            shape[label] = (queries, size)
            if round_ >= 2:
                samples[label].append(elapsed)
    return [(label, _support.median(samples[label]), *shape[label]) for label, _ in sides]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--sizes", default="10,1000,10000")
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(",")]
    with _support.own_database("lists"):
        started = timezone.now() - dt.timedelta(hours=1)
        machine_type = MachineTypeFactory(provider="simulated")
        made = time.monotonic()
        workspaces = [(f"{n:,} × 8", build(f"w{n}", n, 8, machine_type, started)) for n in sizes]
        wide = [("50 × 8", build("wide8", 50, 8, machine_type, started)),
                ("50 × 64", build("wide64", 50, 64, machine_type, started))]
        with connection.cursor() as cursor:
            # What autovacuum does after a bulk load: planner statistics, and the visibility map
            # that lets a count read an index alone (PostgreSQL vacuums inserted tables too).
            cursor.execute("VACUUM ANALYZE")
        print(f"api lists bench: {', '.join(label for label, _ in workspaces)} clusters × machines, and 50 × 8 vs "
              f"50 × 64 (built in {time.monotonic() - made:.0f} s); median of {args.repeat}")
        lists = [
            ("GET /api/v1/clusters (50 a page)", lambda d: "/api/v1/clusters?status=all&limit=50"),
            ("GET /api/v1/instances (50 a page)", lambda d: "/api/v1/instances?limit=50"),
            ("GET /api/v1/clusters/{id}/events (50 a page)", lambda d: f"/api/v1/clusters/{d['newest']}/events?limit=50"),
            ("GET /api/v1/clusters/{id}/network-tests", lambda d: f"/api/v1/clusters/{d['newest']}/network-tests"),
        ]
        print(f"{'list':<46} | {'clusters × machines':>19} | {'median':>8} | {'queries':>7} | {'bytes':>9} | vs first")
        print("-" * 110)
        for title, url_of in lists:
            rows = measure(workspaces, url_of, args.repeat)
            if title.startswith("GET /api/v1/clusters (50"):
                rows += measure(wide, url_of, args.repeat)
            first = {}
            for label, seconds, queries, size in rows:
                group = "wide" if label.startswith("50 ×") else "sizes"
                base = first.setdefault(group, seconds)
                print(f"{title:<46} | {label:>19} | {seconds * 1000:6.1f}ms | {queries:>7} | {size:>9,} | "
                      f"{seconds / base:.2f}×")


if __name__ == "__main__":
    main()
