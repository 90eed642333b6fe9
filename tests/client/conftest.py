"""Fixtures for the client tests: a real local HTTP server speaking the API contract, and runners
for the CLI that work against any base URL (the fake here, or a live Django server in e2e tests).

Reuse from an end-to-end test:

    def test_cli_lists_offers(live_server, api_key, run_runcrate):
        result = run_runcrate(["clusters", "offers", "--gpu", "H100"], base_url=live_server.url, api_key=api_key)
        assert result.returncode == 0
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from fake_api import VALID_KEY, FakeApi

from runcrate_client.cli import main

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNCRATE_ENV_VARS = ("RUNCRATE_API_KEY", "RUNCRATE_API_URL", "RUNCRATE_ENVIRONMENT", "RUNCRATE_CONFIG",
                     "RUNCRATE_MCP_SECRET")


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str


def runcrate_env(
    base_url: str, api_key: str | None, environment: str | None = None, config_path: Path | str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment variables that point the CLI or the MCP server at one API."""
    env = {k: v for k, v in os.environ.items() if k not in RUNCRATE_ENV_VARS}
    env["RUNCRATE_API_URL"] = base_url
    if api_key is not None:
        env["RUNCRATE_API_KEY"] = api_key
    if environment is not None:
        env["RUNCRATE_ENVIRONMENT"] = environment
    # Never read the developer's own ~/.runcrate/config.yaml from a test.
    env["RUNCRATE_CONFIG"] = str(config_path or Path(os.devnull + ".runcrate-test-none.yaml"))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


def run_runcrate(
    args: Sequence[str], *, base_url: str, api_key: str | None, environment: str | None = None,
    config_path: Path | str | None = None, input: str | None = None, timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """Run `python -m runcrate_client ARGS` in a subprocess against `base_url`: the real CLI, real HTTP."""
    return subprocess.run(
        [sys.executable, "-m", "runcrate_client", *args],
        env=runcrate_env(base_url, api_key, environment, config_path),
        input=input, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
    )


@pytest.fixture(name="run_runcrate")
def run_runcrate_fixture() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_runcrate


@pytest.fixture
def fake_api() -> Iterator[FakeApi]:
    api = FakeApi().start()
    yield api
    api.stop()


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated config file path (not created) and no RUNCRATE_* variables from the outside."""
    for name in RUNCRATE_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "runcrate" / "config.yaml"
    monkeypatch.setenv("RUNCRATE_CONFIG", str(path))
    return path


@pytest.fixture
def cli(fake_api: FakeApi, config_file: Path) -> Callable[..., CliResult]:
    """Run the CLI in-process (fast) against the fake API over real HTTP: cli("clusters", "ls")."""

    def invoke(*args: str, api_key: str | None = VALID_KEY, environment: str | None = None,
               input: str | None = None, base_url: str | None = None) -> CliResult:
        env = {"RUNCRATE_API_URL": base_url or fake_api.url, "RUNCRATE_CONFIG": str(config_file)}
        if api_key is not None:
            env["RUNCRATE_API_KEY"] = api_key
        if environment is not None:
            env["RUNCRATE_ENVIRONMENT"] = environment
        result = CliRunner().invoke(main, list(args), env=env, input=input, catch_exceptions=False)
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return invoke
