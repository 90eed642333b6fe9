"""Helpers to run the real `runcrate` CLI or MCP server against an API base URL (the live server in tests)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

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
        input=input, capture_output=True, check=False, text=True, timeout=timeout, cwd=REPO_ROOT,
    )
