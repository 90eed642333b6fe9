"""docs/cli.md's checked examples (```console checked blocks) run as written against the real API on
a live server, and print exactly what the page shows. The scenario: a workspace whose Owner made a
key on the API keys page, $1,000.00 of credit and one offer of six H100 machines (ids from 1)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.client.client_support import REPO_ROOT

pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True)

CLI_DOC = REPO_ROOT / "docs" / "cli.md"


def checked_examples(path: Path) -> list[tuple[str, str]]:
    """(command line, expected output) of every `$ runcrate …` line in the page's checked blocks."""
    examples: list[tuple[str, str]] = []
    for block in re.findall(r"```console checked\n(.*?)```", path.read_text(), re.DOTALL):
        command: str | None = None
        output: list[str] = []
        for line in block.splitlines():
            if line.startswith("$ "):
                if command is not None:
                    examples.append((command, "\n".join(output)))
                command, output = line[2:], []
            else:
                output.append(line)
        if command is not None:
            examples.append((command, "\n".join(output)))
    return examples


def test_the_page_has_checked_examples():
    commands = [command for command, _ in checked_examples(CLI_DOC)]
    assert len(commands) >= 8 and all(command.startswith("runcrate ") for command in commands)


def test_the_cli_pages_checked_examples_print_what_the_page_shows(cli, instant_offer):
    import shlex

    for command, expected in checked_examples(CLI_DOC):
        result = cli(*shlex.split(command)[1:], input="y\n")
        shown = (result.stdout + result.stderr).rstrip("\n")
        assert shown == expected, f"`{command}` printed:\n{shown}\n\ndocs/cli.md shows:\n{expected}"
