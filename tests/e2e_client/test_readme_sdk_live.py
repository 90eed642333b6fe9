"""The README's SDK example, exactly as written there, against the real API on a live server."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from clusters.models import Cluster
from tests.client.client_support import REPO_ROOT, runcrate_env

pytestmark = pytest.mark.django_db(transaction=True)


def readme_sdk_example() -> str:
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme.split("### The Python SDK", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "the README's SDK section has no ```python block"
    return match.group(1)


def test_the_readme_sdk_example_runs_as_shown(live_server, dashboard_key, instant_offer):
    example = readme_sdk_example()
    assert "from runcrate_client import Client" in example
    result = subprocess.run([sys.executable, "-c", example], env=runcrate_env(live_server.url, dashboard_key),
                            capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, check=False)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "H100 x 2: $5.00/h, can create: True"
    cluster = Cluster.objects.get(name="sdk-demo")
    assert lines[1] == f"cluster {cluster.pk} is ready"
    assert re.fullmatch(r"this month so far: \$\d+\.\d\d", lines[2])
    assert cluster.status in ("terminating", "terminated")
