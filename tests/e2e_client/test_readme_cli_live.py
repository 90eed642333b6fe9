"""The README's terminal block, line by line as written there, in bash, against the real API on a
live server seeded the way `make run` seeds it (`seed_demo`, the demo user, offer 3).

One thing differs from a developer's machine, and only in the environment the lines run in: the
API listens on the live server's port (the block's `RUNCRATE_API_URL` line is given that port
instead of 8000). The webhook line is run as written (a loopback receiver, as under `make run`).
Machines are the simulated provider's, booting at once."""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from django.core.management import call_command
from django.db import connection

from api.models import ApiKey
from clusters.models import Cluster, Node, Status
from clusters.providers.local.sandbox import write_ed25519_keypair
from offers import lab
from offers.models import Host
from tests.client.client_support import REPO_ROOT
from webhooks.models import Endpoint

pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

README_API_URL = "export RUNCRATE_API_URL=http://127.0.0.1:8000"


def readme_terminal_block() -> str:
    section = (REPO_ROOT / "README.md").read_text().split("## Using it from a terminal or an agent", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert match, "the README's terminal section has no ```sh block"
    return match.group(1)


def database_url() -> str:
    settings = connection.settings_dict
    assert connection.vendor == "postgresql", "the block's manage.py line reads DATABASE_URL"
    return f"postgres://{settings['USER']}@{settings['HOST']}:{settings['PORT']}/{settings['NAME']}"


def test_the_readme_terminal_block_runs_line_by_line_as_shown(live_server, tmp_path):
    call_command("seed_demo", provider="simulated", boot_seconds=0)
    lab.inject(Host.objects, boot_seconds=0, join_seconds=0, install_seconds=0)
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    write_ed25519_keypair(home / ".ssh" / "id_ed25519", "laptop")

    block = readme_terminal_block()
    assert README_API_URL in block
    lines = [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    script = ["set -eo pipefail"]
    for number, line in enumerate(lines):
        if line.startswith(README_API_URL):
            line = line.replace("http://127.0.0.1:8000", live_server.url)
        # A marker before each line: the output is split by line, and `set -e` stops at the first that fails.
        script += [f"echo '::line:: {number}'", line]
    env = {key: value for key, value in os.environ.items() if not key.startswith("RUNCRATE_")}
    env.update(HOME=str(home), DATABASE_URL=database_url(), RUNCRATE_CONFIG=str(tmp_path / "none.yaml"))
    try:
        result = subprocess.run(["bash", "-c", "\n".join(script)], cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                                capture_output=True, text=True, timeout=240, check=False)
    except subprocess.TimeoutExpired as timeout:
        pytest.fail(f"the block did not finish:\n{timeout.stdout!r}\n{timeout.stderr!r}")
    said = {int(number): text for number, text in re.findall(r"::line:: (\d+)\n(.*?)(?=::line:: |\Z)", result.stdout,
                                                              re.DOTALL)}
    ran = len(said)
    assert result.returncode == 0, f"`{lines[ran - 1]}` failed:\n{said.get(ran - 1)}\n{result.stderr}"
    assert ran == len(lines)

    def output(command: str) -> str:
        return next(said[number] for number, line in enumerate(lines) if line.startswith(command))

    assert ApiKey.objects.get().name == "created by manage.py", "the block's manage.py line made the key"
    assert "laptop" in output("runcrate ssh-keys add")
    assert "H100" in output("runcrate clusters offers")
    cluster = Cluster.objects.get(name="train")
    assert cluster.status == Status.READY
    assert "is ready" in output("runcrate clusters create --name train --offer 3 --machines 4 --software slurm "
                                "--ssh-key 1 --watch")
    info = output("runcrate clusters info train")
    assert all(f"node-{index}" in info for index in range(4)) and "10.77.0.3" in info
    # As pasted, with no name resolution arranged: the line works under `make run` as it is.
    assert Endpoint.objects.get().url == "http://127.0.0.1:9000/rc"
    assert cluster.nodes.filter(index=2, released_at__isnull=True, state=Node.State.READY).count() == 1
    assert cluster.nodes.filter(index=2).count() == 2, "node-2 was replaced"
    assert "Cluster usage train" in output("runcrate billing usage")
