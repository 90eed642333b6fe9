"""`make run` keeps its data in SQLite: every migration applies there too, not only on
PostgreSQL (which the rest of the suite uses in CI)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_migration_applies_to_a_fresh_sqlite_database(tmp_path):
    environment = {**os.environ, "DEBUG": "1", "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    migrated = subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=environment,
                              capture_output=True, text=True, timeout=300)
    assert migrated.returncode == 0, migrated.stderr[-2000:]
    shown = subprocess.run([sys.executable, "manage.py", "showmigrations", "--plan"], cwd=ROOT, env=environment,
                           capture_output=True, text=True, timeout=120)
    assert "[ ]" not in shown.stdout
