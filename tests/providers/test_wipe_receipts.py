"""The wipe receipt on real nodes: every released machine is checked clean on its host, the check
recorded as an event per machine, and a slot goes back on sale only after a clean one."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from clusters.models import Status
from clusters.providers.local import realnodes
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from notifications.models import Notification
from offers.models import Host
from tests.providers.conftest import SETTLED, drive
from tests.providers.test_real_nodes import CAN, WHY, real_machine_type, real_machines, story  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
]
CHECKS = "processes, cgroups, network, disk, uid range, keys, GPUs"


def receipts(cluster) -> list[str]:
    return list(cluster.events.filter(event="wipe_receipt").order_by("id").values_list("message", flat=True))


def test_each_machine_of_a_terminated_cluster_is_checked_clean_and_its_slot_goes_back_on_sale(
    environment, real_machines
):
    machine_type = real_machine_type(2)
    cluster = create_cluster(environment=environment, name="clean", machine_type=machine_type, machine_count=2)
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)

    terminate_cluster(cluster, actor="alice")
    cluster = drive(cluster, {Status.TERMINATED}, timeout=60)

    said = receipts(cluster)
    assert [line.split("'")[0] for line in said] == ["node-0", "node-1"]
    assert all(" was wiped and checked clean at " in line and line.endswith(f": {CHECKS}.") for line in said), said
    assert set(Host.objects.filter(machine_type=machine_type).values_list("state", flat=True)) == {"free"}


def test_a_machine_whose_wipe_finds_a_process_of_its_uid_range_left_stays_out_of_sale_and_operators_are_told(
    environment, real_machines, settings
):
    settings.OPERATOR_EMAILS = ["ops@runcrate.example"]
    machine_type = real_machine_type(2)
    cluster = create_cluster(environment=environment, name="leaky", machine_type=machine_type, machine_count=2)
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)
    node = cluster.nodes.select_related("host").get(index=1)
    handle = realnodes.running(real_machines / node.host.name)
    assert handle is not None
    # A process of the machine's uid range outside its namespaces: what an escape would leave,
    # which killing the machine's PID 1 does not end.
    uid = handle.uid_base + 1000
    escaped = subprocess.Popen(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "sleep", "300"],
                               start_new_session=True)
    try:
        terminate_cluster(cluster, actor="alice")
        cluster = drive(cluster, {Status.TERMINATED}, timeout=60)

        said = receipts(cluster)
        assert " was wiped and checked clean at " in said[0]
        assert "node-1's machine was released but not checked clean at " in said[1]
        assert "(processes not clean)" in said[1] and "out of sale" in said[1]
        states = dict(Host.objects.filter(machine_type=machine_type).values_list("name", "state"))
        assert states == {node.host.name: "quarantined", cluster.nodes.get(index=0).host.name: "free"}
        slot = Host.objects.get(pk=node.host_id)
        assert f"process {escaped.pid}" in slot.quarantine_reason
        assert Notification.objects.filter(kind="host_quarantined").count() == 1
    finally:
        os.kill(escaped.pid, signal.SIGKILL)
        escaped.wait()
