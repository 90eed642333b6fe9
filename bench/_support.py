"""What the benches share (not a bench itself: `make bench` runs bench/*.py but not bench/_*.py).

Each bench works in a PostgreSQL database of its own, created from DATABASE_URL's server
with every migration applied and dropped at the end, so it measures and meters only the
machines it made: never a developer's `make run` data, never another engineer's rows.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("DEBUG", "1")
# Pushes of this run travel under a channel prefix nobody else uses.
os.environ.setdefault("CHANNEL_PREFIX", f"bench-{uuid.uuid4().hex[:8]}")


def setup_django() -> None:
    import django

    django.setup()


@contextlib.contextmanager
def own_database(tag: str):
    """A fresh, migrated database for this bench, dropped afterwards; yields its URL."""
    from django.conf import settings
    from django.db import connection
    from django.test.utils import setup_databases, teardown_databases

    if connection.vendor != "postgresql":
        raise SystemExit("the benches need PostgreSQL: set DATABASE_URL=postgres://…")
    db = settings.DATABASES["default"]
    name = f"{db['NAME']}_bench_{tag}_{os.getpid()}"
    db.setdefault("TEST", {})["NAME"] = name
    # Build the ORM's connection to the new database before anything is measured.
    state = setup_databases(verbosity=0, interactive=False)
    auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
    url = f"postgres://{auth}@{db.get('HOST') or '127.0.0.1'}:{db.get('PORT') or 5432}/{name}"
    try:
        yield url
    finally:
        connection.close()
        teardown_databases(state, verbosity=0)


def machine_cpu_seconds() -> float:
    """CPU time every process of this computer has used so far, all CPUs (/proc/stat)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    k = (len(ordered) - 1) * p
    low, high = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(rows: list[tuple[str, str, str, bool]]) -> str:
    """The issue's table: measure | measured | goal | met."""
    lines = ["| measure | measured | goal | met |", "| --- | --- | --- | --- |"]
    lines += [f"| {measure} | {measured} | {goal} | {'yes' if met else 'NO'} |" for measure, measured, goal, met in rows]
    return "\n".join(lines)
