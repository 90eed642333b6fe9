"""Fixtures for the node operations: real SSH servers on loopback addresses.

The nodeops package has no Django imports; these tests run with or without
pytest-django (`.venv/bin/pytest -p no:django tests/nodeops`).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from clusters.nodeops.runner import NodeRunner, RetryPolicy  # noqa: E402
from clusters.providers.local.sandbox import find_sshd, start_endpoints  # noqa: E402

NODES = 4


@pytest.fixture(scope="session")
def openssh_endpoints(tmp_path_factory):
    if find_sshd() is None:
        pytest.skip("OpenSSH sshd is not installed (apt-get install openssh-server)")
    pool = start_endpoints(NODES, tmp_path_factory.mktemp("openssh"), kind="openssh")
    yield pool
    pool.stop()


@pytest.fixture(scope="session")
def asyncssh_endpoints(tmp_path_factory):
    pool = start_endpoints(NODES, tmp_path_factory.mktemp("asyncssh"), kind="asyncssh")
    yield pool
    pool.stop()


@pytest.fixture
def endpoints(openssh_endpoints):
    """Four sshd endpoints with empty sandbox roots: a fresh set of machines per test."""
    openssh_endpoints.reset_roots()
    return openssh_endpoints


@pytest.fixture
def runner():
    """Quick to give up, so unreachable-node tests take seconds, not minutes."""
    with NodeRunner(RetryPolicy(connect_timeout=2, attempts=3, backoff=0.05, command_timeout=60)) as runner:
        yield runner


@pytest.fixture
def shellcheck():
    path = shutil.which("shellcheck")
    if path is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    return path
