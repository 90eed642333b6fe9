"""The host runtime: a program of its own on a host's Python, installed by `hosts add`, that
boots a cluster's machines on a lab host exactly as on this computer."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator

import pytest
from fabric import Connection

from clusters import connect
from clusters.models import Status
from clusters.providers.local import realnodes
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from offers import hostruntime
from offers.models import Host, MachineType, PhysicalHost
from tests.factories import MachineTypeFactory
from tests.providers.conftest import SETTLED, drive
from tests.providers.test_real_nodes import customer_key, customer_ssh, story

from .conftest import add_host, needs_lab

HOST_PYTHON = "/usr/bin/python3"
CAN, WHY = realnodes.capability()


def unpacked(tmp_path):
    folder = tmp_path / "runtime"
    folder.mkdir()
    hostruntime.unpack_bundle(folder)
    return folder


def run_shipped(folder, *args: str, request: dict | None = None, state=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [HOST_PYTHON, "-I", str(folder / "run.py"), *args], input=json.dumps(request or {}), capture_output=True,
        text=True, timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "RUNCRATE_HOST_STATE": str(state)},
    )


def test_the_shipped_runtime_answers_in_json_on_the_hosts_own_python_with_nothing_of_the_control_plane(tmp_path):
    folder = unpacked(tmp_path)
    state = tmp_path / "state"

    checked = run_shipped(folder, "check", state=state)
    listed = run_shipped(folder, "list", state=state)
    wrong = run_shipped(folder, "reboot-everything", state=state)
    imported = subprocess.run(
        [HOST_PYTHON, "-I", "-c", f"import sys; sys.path.insert(0, {str(folder)!r}); "
         "import clusters.providers.local.runtime; print(sorted(m.split('.')[0] for m in sys.modules))"],
        capture_output=True, text=True, timeout=60,
    )

    answer = json.loads(checked.stdout)
    assert checked.returncode == 0, checked.stderr
    assert answer["version"] == hostruntime.version() == (folder / "VERSION").read_text().strip()
    assert answer["machines"] == CAN and answer["python"].startswith("3.")
    assert json.loads(listed.stdout) == {"machines": []}
    assert wrong.returncode == 2 and "usage" in json.loads(wrong.stdout)["error"]
    modules = set(json.loads(imported.stdout.replace("'", '"')))
    assert "clusters" in modules
    assert not modules & {"django", "paramiko", "fabric", "invoke", "cryptography", "config"}


def test_a_changed_runtime_module_is_a_new_version(monkeypatch):
    before = hostruntime.version()
    files = hostruntime.bundle_files()
    monkeypatch.setattr(hostruntime, "bundle_files", lambda: {**files, "clusters/providers/local/realnodes.py": b"# x"})
    assert hostruntime.version() != before


def host_connection(host: dict) -> Connection:
    return Connection(host=host["address"], port=host["port"], user="root",
                      connect_kwargs={"key_filename": host["ssh_key"], "look_for_keys": False, "allow_agent": False})


@pytest.mark.django_db
@needs_lab
def test_hosts_add_installs_this_version_of_the_runtime_and_it_answers_over_ssh(lab):
    machine_type = MachineTypeFactory(provider="local", gpus_per_machine=1, disk_gb=100)

    add_host(lab["lab-1"], machine_type.pk, 2)

    host = PhysicalHost.objects.get()
    with host_connection(lab["lab-1"]) as connection:
        installed = connection.run("cat /var/lib/runcrate-host/VERSION", hide=True, in_stream=False).stdout.strip()
    assert installed == hostruntime.version()
    [runtime] = [check for check in host.grade if check["check"] == "runtime"]
    assert hostruntime.version() in runtime["detail"]
    from clusters.providers.fleet import runtime_for

    assert runtime_for(host).call("list") == {"machines": []}
    assert sorted(host.slots.values_list("port", flat=True)) == [2200, 2201]


@contextlib.contextmanager
def onboarded(lab_host: dict, machines: int, settings, tmp_path) -> Iterator[tuple[MachineType, PhysicalHost]]:
    """A machine type sold from `machines` slots of a lab host, booted as real nodes through its
    runtime; every slot released on its host afterwards."""
    from clusters.providers.fleet import runtime_for
    from clusters.providers.local import provider as local

    settings.LOCAL_MACHINES_DIR = str(tmp_path / "machines")
    settings.LOCAL_NODES = "namespaces"
    local._MODE.clear()
    machine_type = MachineTypeFactory(provider="local", gpus_per_machine=1, disk_gb=100)
    add_host(lab_host, machine_type.pk, machines)
    host = PhysicalHost.objects.get()
    try:
        yield machine_type, host
    finally:
        for slot in Host.objects.filter(physical_host=host):
            runtime_for(host).call("release", {"key": slot.name})
        local._MODE.clear()


@pytest.mark.django_db(transaction=True)
@needs_lab
@pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}")
def test_a_slurm_cluster_boots_on_a_lab_host_through_its_runtime_and_its_customer_reaches_it(
    lab, environment, owner, settings, tmp_path
):
    from accounts.services import add_ssh_key
    from clusters.providers.fleet import runtime_for

    alice_key, alice_public = customer_key(tmp_path, "alice")
    key = add_ssh_key(workspace=environment.workspace, name="laptop", created_by=owner, public_key=alice_public)
    with onboarded(lab["lab-1"], 2, settings, tmp_path) as (machine_type, host):
        cluster = create_cluster(environment=environment, name="far", machine_type=machine_type, machine_count=2,
                                 software="slurm", ssh_keys=[key])
        cluster = drive(cluster, SETTLED, timeout=180)
        assert cluster.status == Status.READY, story(cluster)

        on_host = runtime_for(host).call("list")["machines"]
        assert sorted((m["key"], m["running"]) for m in on_host) == [("lab-1-0", True), ("lab-1-1", True)]
        assert not (tmp_path / "machines" / "lab-1-0").exists(), "a fleet machine's state is on its host only"
        lines = {ep.name: ep.ssh_command for ep in connect.endpoints(cluster)}
        assert lab["lab-1"]["address"] in lines["node-1"]
        session = customer_ssh(lines["node-0"], alice_key, "hostname; srun -N2 hostname | sort")
        assert session.returncode == 0, session.stderr
        assert session.stdout.split() == ["node-0", "node-0", "node-1"], session.stdout

        terminate_cluster(cluster, actor="alice")
        cluster = drive(cluster, {Status.TERMINATED}, timeout=60)
        assert cluster.status == Status.TERMINATED
        assert runtime_for(host).call("list") == {"machines": []}
        # Each machine was checked clean on its host before its slot went back on sale.
        receipts = list(cluster.events.filter(event="wipe_receipt").values_list("message", flat=True))
        assert len(receipts) == 2 and all(" was wiped and checked clean at " in line for line in receipts), receipts
        assert set(Host.objects.filter(physical_host=host).values_list("state", flat=True)) == {"free"}


@pytest.mark.django_db(transaction=True)
@needs_lab
@pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}")
def test_a_host_that_stops_answering_turns_its_nodes_unhealthy_in_customer_words_and_goes_down_out_of_sale(
    lab, environment, owner, settings, tmp_path
):
    from clusters.models import NodeHealth
    from clusters.node_health import tasks
    from offers.inventory import list_offers

    from .conftest import lab_hosts

    with onboarded(lab["lab-2"], 3, settings, tmp_path) as (machine_type, host):
        try:
            cluster = create_cluster(environment=environment, name="doomed", machine_type=machine_type, machine_count=2,
                                     software="none", created_by=owner)
            cluster = drive(cluster, SETTLED, timeout=120)
            assert cluster.status == Status.READY, story(cluster)
            assert tasks.check_cluster_health(cluster.pk) == {"node-0": NodeHealth.HEALTHY, "node-1": NodeHealth.HEALTHY}
            assert [offer.available_machines for offer in list_offers(machine_type.gpu, 1)] == [1]

            lab_hosts(lab["lab-2"]["dir"], "stop", "lab-2")
            found = tasks.check_cluster_health(cluster.pk)

            assert found == {"node-0": NodeHealth.UNREACHABLE, "node-1": NodeHealth.UNREACHABLE}, found
            details = {node.name: node.health_detail for node in cluster.nodes.all()}
            assert details == {"node-0": "node-0's host stopped answering", "node-1": "node-1's host stopped answering"}
            host.refresh_from_db()
            assert host.state == PhysicalHost.State.DOWN
            assert list_offers(machine_type.gpu, 1) == [], "a down host's free slot is still on sale"
            said = cluster.events.filter(event="node_unhealthy").values_list("message", flat=True)
            assert any("lab-2" not in line and "host stopped answering" in line for line in said), list(said)
        finally:
            lab_hosts(lab["lab-2"]["dir"], "start", "lab-2")
