"""The host's admin page shows its grade, check by check, and its slots; hosts are not added
there (only `manage.py hosts add` grades them first)."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from offers.models import Host, PhysicalHost
from tests.factories import MachineTypeFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator() -> Client:
    client = Client()
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    return client


def test_the_host_page_shows_each_check_with_its_verdict_and_the_slots(operator):
    host = PhysicalHost.objects.create(
        name="gpu-7", address="203.0.113.7", ssh_key_path="/etc/runcrate/fleet_key", state=PhysicalHost.State.ON_SALE,
        grade=[{"check": "kernel", "verdict": "pass", "detail": "Linux 6.1.0-26-amd64"},
               {"check": "GPUs", "verdict": "fail", "detail": "4 GPUs found, 3 machines of 2× H100 need 6"}],
    )
    Host.objects.create(machine_type=MachineTypeFactory(), physical_host=host, name="gpu-7-0")

    page = operator.get(reverse("admin:offers_physicalhost_change", args=[host.pk])).content.decode()
    listing = operator.get(reverse("admin:offers_physicalhost_changelist")).content.decode()

    assert '<tr class="grade-pass"><th>kernel</th><td>pass</td><td>Linux 6.1.0-26-amd64</td></tr>' in page
    assert "<th>GPUs</th><td>fail</td><td>4 GPUs found, 3 machines of 2× H100 need 6</td>" in page
    assert "gpu-7-0" in page
    assert "Fail: GPUs" in listing


def test_hosts_are_not_added_in_the_admin(operator):
    assert operator.get(reverse("admin:offers_physicalhost_add")).status_code == 403
