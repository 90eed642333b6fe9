"""The programs `make` runs without Django's settings start: `make images` builds the nodes'
images with `python -m clusters.providers.local.images`, before any database exists."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parents[2]


def test_the_image_builder_starts_without_django_settings():
    env = {name: value for name, value in os.environ.items() if name != "DJANGO_SETTINGS_MODULE"}
    ran = subprocess.run([sys.executable, "-m", "clusters.providers.local.images", "--help"], cwd=BASE_DIR, env=env,
                         capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert "build" in ran.stdout
