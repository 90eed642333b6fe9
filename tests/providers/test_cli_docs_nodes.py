"""docs/cli.md's block checked on real nodes (```console checked-on-nodes): each line runs as
written from the customer's terminal (tests/providers/test_customer_loop.Terminal) against a live
server with a ready 3-node cluster `train`, and prints what the page shows. Lines from different
nodes arrive in any order, so each command's lines are compared as a sorted list."""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
import urllib.request

import pytest

from clusters.providers.local import realnodes
from tests.e2e_client.test_cli_docs import CLI_DOC
from tests.providers.test_customer_loop import ready_cluster, terminal  # noqa: F401 - the fixture
from tests.providers.test_real_nodes import real_machine_type, real_machines, wait_for  # noqa: F401 - the fixture

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
]


def node_examples() -> list[tuple[str, str]]:
    examples: list[tuple[str, str]] = []
    for block in re.findall(r"```console checked-on-nodes\n(.*?)```", CLI_DOC.read_text(), re.DOTALL):
        for part in re.split(r"^\$ ", block, flags=re.MULTILINE)[1:]:
            command, _, output = part.partition("\n")
            examples.append((command, output.rstrip("\n")))
    return examples


def test_the_page_shows_exec_cp_and_port_forward():
    commands = " ".join(command for command, _ in node_examples())
    assert all(f"runcrate clusters {name}" in commands for name in ("exec", "cp", "port-forward", "ssh"))


def test_the_cli_pages_node_examples_print_what_the_page_shows(environment, real_machines, terminal, tmp_path):
    ready_cluster(environment, real_machine_type(3), "train", 3)
    (tmp_path / "notes.txt").write_text("hello from my laptop\n")
    background: list[subprocess.Popen[str]] = []
    try:
        for command, expected in node_examples():
            words = shlex.split(command)
            if words[0] == "curl":
                url = words[-1]
                shown = wait_for(lambda url=url: _get(url), timeout=60).rstrip("\n")
            elif words[-1] == "&":
                process = subprocess.Popen([sys.executable, "-m", "runcrate_client", *words[1:-1]], env=terminal.env,
                                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                background.append(process)
                assert process.stdout is not None
                shown = process.stdout.readline().rstrip("\n")
            else:
                result = terminal.runcrate(*words[1:])
                shown = (result.stdout + result.stderr).rstrip("\n")
            assert sorted(shown.splitlines()) == sorted(expected.splitlines()), (
                f"`{command}` printed:\n{shown}\n\ndocs/cli.md shows:\n{expected}")
        assert (tmp_path / "node-1-hostname").read_text() == "node-1\n"
    finally:
        for process in background:
            process.send_signal(signal.SIGINT)
            process.communicate(timeout=30)


def _get(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.read().decode()
    except OSError:
        return ""
