"""The audit log: what an entry adds to an action, and its list at 1,000 vs 1,000,000 entries.

    DATABASE_URL=postgres://… .venv/bin/python bench/audit_bench.py [--repeat 15] [--large 1000000]

One PostgreSQL database of its own (bench/_support.py).

- Actions (each through its service, as a page or the API calls it): the SQL statements of the
  action, how many are INSERTs, and how many touch the audit table. Writing the entry is one
  INSERT into audit_auditevent and nothing else (no read, no update).
- The list: two workspaces, one with 1,000 entries and one with --large (1,000,000) made in one
  INSERT … SELECT over generate_series; `GET /api/v1/audit-events` (50 a page), its page after
  a cursor deep in the history, a filtered list, and the Audit page, through Django's full
  request stack; the median of --repeat after two warm-ups, and the ratio large / small. On the
  index (workspace, created_at, id) a page reads 51 rows wherever it starts.

Prints figures; asserts nothing.
"""

from __future__ import annotations

import argparse
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

from accounts import services as accounts  # noqa: E402
from accounts.models import Membership, Role  # noqa: E402
from api.keys import create_api_key  # noqa: E402
from audit import queries  # noqa: E402
from audit.models import AuditEvent  # noqa: E402
from clusters.services.create import create_cluster  # noqa: E402
from clusters.services.terminate import terminate_cluster  # noqa: E402
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts  # noqa: E402

ED25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl laptop"
TABLE = AuditEvent._meta.db_table


def fill(workspace_id: int, count: int) -> None:
    """`count` entries, one a second back from now, in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (workspace_id, created_at, actor_kind, actor_user_id, actor, surface, "
            "client_address, action, object_type, object_id, object_label, changes, cluster_event_id) "
            "SELECT %s, now() - make_interval(secs => g), 'member', NULL, 'alice', 'page', '127.0.0.1', "
            "CASE WHEN g %% 10 = 0 THEN 'cluster.terminate' ELSE 'ssh_key.add' END, "
            "CASE WHEN g %% 10 = 0 THEN 'cluster' ELSE 'sshkey' END, g::text, 'key ' || g, "
            "'{\"name\": [null, \"laptop\"]}'::jsonb, NULL FROM generate_series(1, %s) AS g",
            [workspace_id, count],
        )


def owner_of(name: str):
    owner = UserFactory(username=name)
    membership = MembershipFactory(user=owner, role=Role.OWNER, workspace=WorkspaceFactory(name=name))
    return owner, membership


def actions() -> None:
    owner, membership = owner_of("actions")
    workspace = membership.workspace
    machine_type = machine_type_with_hosts(4)
    environment = workspace.default_environment
    state: dict = {}

    def terminate() -> None:
        terminate_cluster(state["cluster"], actor="actions")

    def create() -> None:
        state["cluster"] = create_cluster(environment=environment, name="bench", machine_type=machine_type,
                                          machine_count=2, actor="actions")

    steps = [
        ("add an SSH key", lambda: accounts.add_ssh_key(workspace=workspace, name="laptop", public_key=ED25519,
                                                        created_by=owner)),
        ("set a budget", lambda: accounts.set_budget(by=Membership.objects.get(pk=membership.pk),
                                                     environment=environment, monthly_budget=Decimal("250"))),
        ("make an API key", lambda: create_api_key(workspace=workspace, created_by=owner, name="ci")),
        ("create a cluster (2 machines)", create),
        ("terminate it", terminate),
    ]
    print(f"{'action':<32} | {'statements':>10} | {'INSERTs':>7} | {'audit INSERTs':>13} | {'other audit SQL':>15}")
    print("-" * 90)
    for title, run in steps:
        with CaptureQueriesContext(connection) as captured:
            run()
        sql = [q["sql"] for q in captured.captured_queries]
        inserts = [s for s in sql if s.lstrip().upper().startswith("INSERT")]
        audit_inserts = [s for s in inserts if f'"{TABLE}"' in s]
        other_audit = [s for s in sql if f'"{TABLE}"' in s and s not in audit_inserts]
        print(f"{title:<32} | {len(sql):>10} | {len(inserts):>7} | {len(audit_inserts):>13} | {len(other_audit):>15}")


def fetch(client: Client, url: str, key: str | None) -> tuple[float, int]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        response = client.get(url, headers=headers)
        elapsed = time.perf_counter() - started
    assert response.status_code == 200, (url, response.status_code)
    return elapsed, len(captured.captured_queries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--large", type=int, default=1_000_000)
    args = parser.parse_args()
    with _support.own_database("audit"):
        print("audit bench: what an entry adds to an action")
        actions()
        sides = []
        workspace_of: dict[str, int] = {}
        made = time.monotonic()
        for count in (1_000, args.large):
            owner, membership = owner_of(f"w{count}")
            fill(membership.workspace_id, count)
            browser = Client(HTTP_HOST="127.0.0.1")
            browser.force_login(owner)
            key = create_api_key(workspace=membership.workspace, created_by=owner, name="bench")[1]
            sides.append((f"{count:,}", key, browser))
            workspace_of[f"{count:,}"] = membership.workspace_id
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        print(f"\naudit list: 1,000 vs {args.large:,} entries (built in {time.monotonic() - made:.0f} s); "
              f"median of {args.repeat}")
        api = Client(HTTP_HOST="127.0.0.1")
        # A cursor half-way through each workspace's history, made from the entry there.
        deep = {}
        for label, _, _ in sides:
            middle = queries.workspace_entries(workspace_of[label]).filter(
                object_id=str(int(label.replace(",", "")) // 2)).first()
            deep[label] = queries.encode_cursor(middle) if middle else ""
        lists = [
            ("GET /api/v1/audit-events (50 a page)", lambda label: "/api/v1/audit-events?limit=50", "api"),
            ("… after a cursor half-way back", lambda label: f"/api/v1/audit-events?limit=50&cursor={deep[label]}", "api"),
            ("… action=cluster.terminate", lambda label: "/api/v1/audit-events?limit=50&action=cluster.terminate", "api"),
            ("the Audit page", lambda label: "/account/audit/", "page"),
        ]
        print(f"{'list':<40} | {'entries':>9} | {'median':>8} | {'queries':>7} | vs 1,000")
        print("-" * 80)
        for title, url_of, kind in lists:
            samples: dict[str, list[float]] = {label: [] for label, _, _ in sides}
            queries_of: dict[str, int] = {}
            for round_ in range(args.repeat + 2):
                for label, key, browser in sides:
                    client, credential = (api, key) if kind == "api" else (browser, None)
                    elapsed, count = fetch(client, url_of(label), credential)
                    queries_of[label] = count
                    if round_ >= 2:
                        samples[label].append(elapsed)
            base = _support.median(samples[sides[0][0]])
            for label, _, _ in sides:
                seconds = _support.median(samples[label])
                print(f"{title:<40} | {label:>9} | {seconds * 1000:6.1f}ms | {queries_of[label]:>7} | {seconds / base:.2f}×")


if __name__ == "__main__":
    main()
