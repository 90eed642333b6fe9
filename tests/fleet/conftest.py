"""A fleet for the tests: lab hosts (bin/lab-hosts) in a folder of this run's own, taken down
after the session.

    lab-1, lab-2   good hosts (lab-2 is the one tests power off and on)
    lab-3          user namespaces disabled
    lab-4          a 1 GB disk
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command

LAB_HOSTS = Path(settings.BASE_DIR) / "bin" / "lab-hosts"

needs_lab = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(tool) for tool in ("sshd", "socat", "nsenter", "ip")),
    reason="lab hosts are namespaces of this computer: they need root, sshd, socat, nsenter and ip",
)


def lab_hosts(lab_dir: Path, *args: str) -> str:
    done = subprocess.run(
        [str(LAB_HOSTS), *args], capture_output=True, text=True, timeout=120,
        env={**os.environ, "RUNCRATE_LAB_DIR": str(lab_dir)},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="session")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict]]:
    """Lab hosts by name: {"lab-1": {"address", "port", "ssh_key", "dir", …}, …}."""
    lab_dir = tmp_path_factory.mktemp("lab")
    try:
        lab_hosts(lab_dir, "up", "2")
        lab_hosts(lab_dir, "up", "3", "--no-userns")
        lab_hosts(lab_dir, "up", "4", "--disk-gb", "1")
        hosts = {host["name"]: {**host, "dir": lab_dir} for host in json.loads(lab_hosts(lab_dir, "list", "--json"))}
        yield hosts
    finally:
        lab_hosts(lab_dir, "down")


def hosts_command(*args: str) -> str:
    out = io.StringIO()
    call_command("hosts", *args, stdout=out)
    return out.getvalue()


def add_host(host: dict, machine_type_id: int, machines: int) -> str:
    return hosts_command(
        "add", host["address"], "--port", str(host["port"]), "--ssh-key", host["ssh_key"],
        "--machine-type", str(machine_type_id), "--machines", str(machines),
    )
