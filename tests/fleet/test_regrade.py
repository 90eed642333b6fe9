"""A host's grade runs again: daily, and at once after its runtime or its GPU driver changes; a
host whose grade falls goes to draining and the operators are emailed (on a real lab host)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone
from fabric import Connection

from offers import fleet, hostruntime
from offers.inventory import list_offers
from offers.models import MachineType, PhysicalHost
from offers.tasks import watch_hosts
from tests.factories import UserFactory
from tests.notifications.conftest import smtp, subject_of, text_of  # noqa: F401 - the fixture

from .conftest import needs_lab
from .test_runtime import onboarded

pytestmark = needs_lab


def on_host(host: dict, command: str) -> str:
    with Connection(host=host["address"], port=host["port"], user="root", connect_kwargs={
            "key_filename": host["ssh_key"], "look_for_keys": False, "allow_agent": False}) as connection:
        return connection.run(command, hide=True, in_stream=False).stdout.strip()


@pytest.mark.django_db(transaction=True)
def test_a_host_is_graded_again_after_a_new_runtime_and_daily_and_drains_with_an_email_when_its_grade_falls(
    lab, settings, tmp_path, smtp
):
    settings.OPERATOR_EMAILS = ["fleet@runcrate.test"]
    with onboarded(lab["lab-1"], 2, settings, tmp_path) as (machine_type, host):
        graded_at = host.graded_at
        assert host.graded_because == "onboarding" and host.runtime_version == hostruntime.version()
        assert watch_hosts() == {}, "a host graded today whose runtime and driver did not change is not graded again"

        # The runtime on the host is not the one this control plane ships (as after a deploy):
        # the new one is installed and the host graded again at once.
        on_host(lab["lab-1"], f"echo 0ld0ld0ld0ld > {hostruntime.HOST_STATE}/VERSION")
        assert watch_hosts() == {"lab-1": f"a new runtime version (0ld0ld0ld0ld → {hostruntime.version()})"}
        assert on_host(lab["lab-1"], f"cat {hostruntime.HOST_STATE}/VERSION") == hostruntime.version()
        host.refresh_from_db()
        assert host.graded_at and graded_at and host.graded_at > graded_at
        assert host.state == PhysicalHost.State.ON_SALE and host.grade_passes
        assert host.graded_because.startswith("a new runtime version")

        # A day on, the daily grade: the type's machines now need more disk than the host has
        # (an operator raised it), so the grade fails; the host drains and the operators hear it.
        MachineType.objects.filter(pk=machine_type.pk).update(disk_gb=1_000_000)
        PhysicalHost.objects.filter(pk=host.pk).update(graded_at=timezone.now() - fleet.REGRADE_EVERY - dt.timedelta(minutes=1))
        assert watch_hosts() == {"lab-1": "the daily grade"}
        host.refresh_from_db()
        assert host.state == PhysicalHost.State.DRAINING and not host.grade_passes
        assert list_offers(machine_type.gpu, 1) == []
        [mail] = smtp.inbox.to("fleet@runcrate.test")
        assert subject_of(mail) == "Host draining: lab-1 failed its grade (disk)"
        assert "too little disk" in text_of(mail) and "the daily grade" in text_of(mail)

        # The admin page shows the grade, when and why it ran; the host cannot go back on sale
        # until its grade passes again.
        admin = UserFactory(username="root-op", is_staff=True, is_superuser=True)
        client = Client()
        client.force_login(admin)
        page = client.get(f"/admin/offers/physicalhost/{host.pk}/change/").content.decode()
        assert "the daily grade" in page and "too little disk" in page and "Graded again" in page
        with pytest.raises(fleet.Refused, match="does not pass its grade"):
            fleet.return_host_to_sale("lab-1")

        MachineType.objects.filter(pk=machine_type.pk).update(disk_gb=100)
        PhysicalHost.objects.filter(pk=host.pk).update(graded_at=timezone.now() - fleet.REGRADE_EVERY)
        assert watch_hosts() == {"lab-1": "the daily grade"}
        assert fleet.return_host_to_sale("lab-1").state == PhysicalHost.State.ON_SALE
        assert len(smtp.inbox.to("fleet@runcrate.test")) == 1, "a grade that passes again sends nothing"


def test_a_changed_gpu_driver_is_a_reason_to_grade_again():
    """The driver in the facts against the one recorded (no GPU here: the facts are parsed as
    nvidia-smi prints them on a GPU host)."""
    host = PhysicalHost(name="gpu-1", graded_at=timezone.now(),
                        gpus=[{"index": "0", "name": "NVIDIA H100", "memory_mb": "81559", "driver": "550.54.15"}])
    facts = fleet.Facts.parse(f"runtime_installed={hostruntime.version()}\nnvidia_smi=0\n"
                              "gpu=0, NVIDIA H100, 81559, 560.35.03\n")
    assert fleet.why_grade_again(host, facts, timezone.now()) == "the GPU driver changed (550.54.15 → 560.35.03)"
    same = fleet.Facts.parse(f"runtime_installed={hostruntime.version()}\nnvidia_smi=0\n"
                             "gpu=0, NVIDIA H100, 81559, 550.54.15\n")
    assert fleet.why_grade_again(host, same, timezone.now()) == ""
