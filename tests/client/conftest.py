"""Fixtures for the client tests that need no server (config files, exit codes). Everything that
talks to the API runs against the real server: tests/e2e_client.

Reuse from an end-to-end test:

    # the fixture `run_runcrate`, or `from tests.client.client_support import run_runcrate, runcrate_env`
    def test_cli_lists_offers(live_server, api_key, run_runcrate):
        result = run_runcrate(["clusters", "offers", "--gpu", "H100"], base_url=live_server.url, api_key=api_key)
        assert result.returncode == 0
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.client.client_support import RUNCRATE_ENV_VARS, run_runcrate


@pytest.fixture(name="run_runcrate")
def run_runcrate_fixture() -> Callable[..., subprocess.CompletedProcess[str]]:
    return run_runcrate


@pytest.fixture
def config_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An isolated config file path (not created) and no RUNCRATE_* variables from the outside."""
    for name in RUNCRATE_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "runcrate" / "config.yaml"
    monkeypatch.setenv("RUNCRATE_CONFIG", str(path))
    return path
