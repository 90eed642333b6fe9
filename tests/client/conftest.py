"""Fixtures for the client tests: a real local HTTP server speaking the API contract, and runners
for the CLI that work against any base URL (the fake here, or a live Django server in e2e tests).

Reuse from an end-to-end test:

    # the fixture `run_runcrate`, or `from client_support import run_runcrate, runcrate_env`
    def test_cli_lists_offers(live_server, api_key, run_runcrate):
        result = run_runcrate(["clusters", "offers", "--gpu", "H100"], base_url=live_server.url, api_key=api_key)
        assert result.returncode == 0
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from client_support import RUNCRATE_ENV_VARS, CliResult, run_runcrate
from fake_api import VALID_KEY, FakeApi

from runcrate_client.cli import main


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
