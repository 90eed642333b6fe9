"""A live server on 127.0.0.1 (pytest-django's live_server: real HTTP, the real Django app) and a key
made the way a customer makes one: on the API keys page."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from offers.models import Host


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
    assert not Host.objects.filter(machine_type=machine_type).exclude(boot_seconds=0, join_seconds=0,
                                                                     install_seconds=0).exists()
    return machine_type
