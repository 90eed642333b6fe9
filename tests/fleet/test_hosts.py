"""`manage.py hosts` against real lab hosts: onboarding grades a host over SSH before any of its
machines goes on sale, and drain and remove keep the inventory honest."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.core.management.base import CommandError
from django.db import transaction

from clusters.errors import ClusterError
from clusters.models import Status
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from offers.inventory import list_offers, reserve_hosts
from offers.models import Host, PhysicalHost
from tests.factories import MachineTypeFactory, ready_cluster

from .conftest import add_host, hosts_command, lab_hosts, needs_lab

pytestmark = [pytest.mark.django_db, needs_lab]

CHECKS = ["kernel", "user namespaces", "cgroups", "WireGuard", "GPUs", "disk", "runtime"]


@pytest.fixture
def demo_type(db):
    """A machine type whose machines get no GPU (simulated), 100 GB of disk each."""
    return MachineTypeFactory(provider="simulated", gpus_per_machine=1, disk_gb=100)


def refusal(host: dict, machine_type_id: int, machines: int) -> str:
    with pytest.raises(CommandError) as refused:
        add_host(host, machine_type_id, machines)
    assert refused.value.returncode == 2
    message = str(refused.value)
    assert "\n" not in message
    assert PhysicalHost.objects.count() == 0 and Host.objects.count() == 0, "a refused host added something"
    return message


def test_a_good_host_puts_its_machines_on_sale_after_passing_every_check(lab, demo_type):
    assert list_offers(demo_type.gpu, 2) == []

    said = add_host(lab["lab-1"], demo_type.pk, 4)

    assert "lab-1" in said and "4 machines on sale" in said
    host = PhysicalHost.objects.get()
    assert (host.name, host.address, host.port, host.state) == ("lab-1", lab["lab-1"]["address"], 22, "on_sale")
    assert [c["check"] for c in host.grade] == CHECKS
    assert all(c["verdict"] == "pass" for c in host.grade), host.grade
    assert host.host_key.startswith("ssh-ed25519 ")
    assert sorted(host.slots.values_list("name", flat=True)) == ["lab-1-0", "lab-1-1", "lab-1-2", "lab-1-3"]
    [offer] = list_offers(demo_type.gpu, 4)
    assert (offer.machine_type, offer.available_machines) == (demo_type, 4)
    assert list_offers(demo_type.gpu, 5) == []


def test_a_host_whose_sshd_does_not_answer_is_refused(lab, demo_type):
    lab_hosts(lab["lab-2"]["dir"], "stop", "lab-2")
    try:
        message = refusal(lab["lab-2"], demo_type.pk, 2)
    finally:
        lab_hosts(lab["lab-2"]["dir"], "start", "lab-2")
    assert message.startswith(f"{lab['lab-2']['address']}:22 refused: no SSH:"), message


def test_a_host_without_user_namespaces_is_refused(lab, demo_type):
    message = refusal(lab["lab-3"], demo_type.pk, 2)
    assert "refused: user namespaces are disabled" in message, message


def test_a_host_with_too_little_disk_is_refused(lab, demo_type):
    message = refusal(lab["lab-4"], demo_type.pk, 2)
    assert "refused: too little disk: 1.0 GB free" in message and "need 200 GB" in message, message


def test_a_host_without_gpus_is_refused_for_a_machine_type_that_gives_gpus(lab):
    gpu_type = MachineTypeFactory(provider="ssh", gpus_per_machine=2, disk_gb=10)
    message = refusal(lab["lab-1"], gpu_type.pk, 2)
    assert "refused: no GPUs: nvidia-smi is not installed; 2 machines of 2× H100 need 4" in message, message


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_the_command_exits_2_with_one_line_naming_the_reason(lab):
    """As an operator's script sees it: the real process, its exit status and its stderr."""
    machine_type = MachineTypeFactory(provider="simulated", gpus_per_machine=1, disk_gb=100)
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    host = lab["lab-3"]
    done = subprocess.run(
        [sys.executable, "manage.py", "hosts", "add", host["address"], "--port", "22", "--ssh-key", host["ssh_key"],
         "--machine-type", str(machine_type.pk), "--machines", "2"],
        cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=120, env={**os.environ, "DATABASE_URL": url, "DEBUG": "1"},
    )
    assert done.returncode == 2, done
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "refused: user namespaces are disabled" in done.stderr
    assert done.stdout == ""
    assert not PhysicalHost.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_list_json_tells_each_host_its_grade_slots_and_the_machines_running_there(lab, demo_type, environment, owner):
    add_host(lab["lab-1"], demo_type.pk, 4)
    cluster = ready_cluster(environment, demo_type, owner, count=3)

    [row] = json.loads(hosts_command("list", "--json"))

    assert {k: row[k] for k in ("name", "address", "state", "slots_total", "slots_used")} == {
        "name": "lab-1", "address": lab["lab-1"]["address"], "state": "on_sale", "slots_total": 4, "slots_used": 3,
    }
    assert [c["check"] for c in row["grade"]] == CHECKS
    assert [(m["cluster"], m["node"]) for m in row["machines"]] == [(cluster.name, f"node-{i}") for i in range(3)]
    table = hosts_command("list")
    assert "lab-1" in table and "3/4 used" in table and "train/node-2" in table


@pytest.mark.django_db(transaction=True)
def test_a_drained_host_takes_no_new_machine_and_keeps_those_running(lab, demo_type, environment, owner):
    add_host(lab["lab-1"], demo_type.pk, 4)
    cluster = ready_cluster(environment, demo_type, owner, count=2)

    assert "draining" in hosts_command("drain", "lab-1")

    assert PhysicalHost.objects.get().state == "draining"
    assert list_offers(demo_type.gpu, 2) == [], "a draining host's free machines are still on sale"
    with transaction.atomic():
        assert reserve_hosts(demo_type, 1) is None
    with pytest.raises(ClusterError) as refused:
        create_cluster(environment=environment, name="more", machine_type=demo_type, machine_count=2, created_by=owner)
    assert refused.value.code in ("offer_unavailable", "not_enough_machines"), refused.value.code
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    assert Host.objects.filter(physical_host__name="lab-1", state=Host.State.RESERVED).count() == 2


@pytest.mark.django_db(transaction=True)
def test_remove_is_refused_while_a_machine_runs_there_and_keeps_history_after(lab, demo_type, environment, owner):
    add_host(lab["lab-1"], demo_type.pk, 3)
    cluster = ready_cluster(environment, demo_type, owner, count=2)

    with pytest.raises(CommandError) as refused:
        hosts_command("remove", "lab-1")
    assert refused.value.returncode == 2
    assert "lab-1 still runs 2 machines" in str(refused.value)
    assert PhysicalHost.objects.filter(name="lab-1").exists() and Host.objects.count() == 3

    hosts_command("drain", "lab-1")
    terminate_cluster(cluster)
    cluster.refresh_from_db()
    assert cluster.status == Status.TERMINATED
    hosts_command("remove", "lab-1")

    assert not PhysicalHost.objects.exists()
    # The slots the cluster ran on stay as its nodes' history, out of sale; the other is gone.
    kept = list(Host.objects.all())
    assert len(kept) == 2 and all(h.state == Host.State.DISABLED and h.physical_host is None for h in kept)
    assert list_offers(demo_type.gpu, 1) == []


def test_fleet_lab_onboards_lab_hosts_with_four_demo_machines_each_and_serves_the_demo_type_from_them_only(
    lab, monkeypatch
):
    from django.core.management import call_command

    from offers.management.commands.fleet_lab import demo_machine_type

    call_command("seed_demo", "--provider", "local", stdout=io.StringIO())
    machine_type = demo_machine_type()
    monkeypatch.setenv("RUNCRATE_LAB_DIR", str(lab["lab-1"]["dir"]))

    call_command("fleet_lab", "2", stdout=io.StringIO())
    call_command("fleet_lab", "2", stdout=io.StringIO())  # again: nothing more is added

    hosts = PhysicalHost.objects.order_by("name")
    assert [(h.name, h.state) for h in hosts] == [("lab-1", "on_sale"), ("lab-2", "on_sale")]
    for_sale = Host.objects.filter(machine_type=machine_type, state=Host.State.FREE)
    assert sorted(for_sale.values_list("name", flat=True)) == [f"lab-{h}-{i}" for h in (1, 2) for i in range(4)]
    [offer] = [o for o in list_offers(machine_type.gpu, 8) if o.machine_type == machine_type]
    assert offer.available_machines == 8
