"""A live server on 127.0.0.1 (pytest-django's live_server: real HTTP, the real Django app) and a key
made the way a customer makes one: on the API keys page."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from offers.models import InjectedFault


@pytest.fixture
def dashboard_key(live_server, owner, workspace) -> str:
    browser = Client()
    browser.force_login(owner)
    page = browser.post(reverse("api:keys"), {"name": "e2e"}, follow=True)
    assert page.status_code == 200
    return page.context["new_key"]["key"]


@pytest.fixture
def instant_offer(machine_type):
    """An offer whose simulated hosts boot, join and install at once (Celery runs eagerly in tests,
    so the create request itself drives the cluster to ready)."""
    assert not InjectedFault.objects.filter(host__machine_type=machine_type).exclude(
        boot_seconds=0, join_seconds=0, install_seconds=0).exists()
    return machine_type


@pytest.fixture
def cli(live_server, dashboard_key, tmp_path):
    """The CLI in-process (fast) over real HTTP against the live server: cli("clusters", "ls")."""
    from click.testing import CliRunner

    from runcrate_client.cli import main
    from tests.client.client_support import CliResult

    def invoke(*args: str, api_key: str | None = dashboard_key, environment: str | None = None,
               input: str | None = None, base_url: str | None = None, workspace: str | None = None) -> CliResult:
        env = {"RUNCRATE_API_URL": base_url or live_server.url, "RUNCRATE_CONFIG": str(tmp_path / "none.yaml"),
               "RUNCRATE_API_KEY": api_key, "RUNCRATE_ENVIRONMENT": environment, "RUNCRATE_WORKSPACE": workspace}
        result = CliRunner().invoke(main, list(args), env=env, input=input, catch_exceptions=False)
        return CliResult(result.exit_code, result.stdout, result.stderr)

    return invoke


@pytest.fixture
def api_client(live_server, dashboard_key):
    from runcrate_client import Client

    with Client(live_server.url, dashboard_key) as client:
        yield client
