"""`make run` keeps its data in SQLite: the periodic metering pass (post usage, warn, stop at
a budget or an empty balance) runs there too, not only on PostgreSQL, which CI's suite uses.
A PostgreSQL-only query (DISTINCT ON) in the low-balance warning once made every pass fail
under `make run`, so no budget and no empty balance ever stopped a cluster there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ON_SQLITE = [
    "tests/billing/test_enforcement.py::test_reaching_the_monthly_budget_stops_that_environments_clusters_only",
    "tests/billing/test_enforcement.py::test_exhausting_the_balance_stops_every_cluster_within_two_sweeps",
    "tests/billing/test_enforcement.py::test_a_top_up_that_leaves_hours_of_runway_is_not_answered_with_balance_is_low",
]


def test_budget_and_balance_stops_and_warnings_run_on_make_runs_sqlite():
    # Without DATABASE_URL and REDIS_URL the suite takes make run's embedded defaults (SQLite).
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *ON_SQLITE], cwd=ROOT,
                         env=environment, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0 and f"{len(ON_SQLITE)} passed" in run.stdout, run.stdout[-4000:]
