"""Nothing in a node can run code in, hold or flood the control plane's sessions.

A node's root owns every file a session on it reads. On real nodes: hangs and floods planted
in every rc file a node has; the control plane's sessions read none of the files its runtime
keeps them from, and what a node's root can always do (its sshd is its own: /etc/ssh/sshrc,
~/.ssh/environment) meets the sessions' deadline and output cap. Health and metrics rounds
return with a verdict within their budgets, and a terminate does not wait on the nodes.
The bounds below are the product's own deadlines, not timings of this computer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.conf import settings
from django.db import connection

from clusters import lifecycle
from clusters.models import Node, NodeHealth, Status
from clusters.node_health import rounds
from clusters.nodeops import operations
from clusters.providers.local import realnodes
from clusters.services.create import create_cluster
from clusters.services.terminate import terminate_cluster
from metrics import collection
from metrics.models import NodeSample
from tests.providers.conftest import SETTLED, drive
from tests.providers.test_real_nodes import handle, real_machine_type, real_machines, story  # noqa: F401

CAN, WHY = realnodes.capability()
pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not CAN, reason=f"real nodes need namespaces: {WHY}"),
]

HANG = "sleep 3600"
# Bounded, so a control plane that reads it all (as it once did) still fits in this computer.
FLOOD = "head -c 64M /dev/zero"
# Files a shell or sshd may read for a session: first those the runtime keeps the control
# plane's sessions from, then those a node's root can always make it read.
RC_FILES = ("/etc/bash.bashrc", "/etc/profile", "/root/.bashrc", "/root/.profile", "/root/.bash_profile",
            "/root/.bash_login", "/root/.ssh/rc")
ALWAYS_READ = ("/etc/ssh/sshrc",)


def within(seconds: float, work: Callable[[], Any]) -> tuple[bool, Any]:
    """Run `work` in a thread; (finished within `seconds`, its result)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as error:  # noqa: BLE001 - reported to the test
            result["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if "error" in result:
        raise result["error"]
    return not thread.is_alive(), result.get("value")


def plant(node_handle: realnodes.NodeHandle, files: tuple[str, ...], line: str) -> None:
    """`line` first in each file (Debian's rc files return early when not interactive)."""
    script = "set -e; mkdir -p /root/.ssh; " + "; ".join(
        f"{{ echo {line!r}; cat {path} 2>/dev/null || true; }} >{path}.new && mv {path}.new {path}" for path in files)
    done = realnodes.run_in(node_handle, ["bash", "--noprofile", "--norc", "-c", script])
    assert done.returncode == 0, done.stderr


def test_hangs_and_floods_in_every_rc_file_hold_no_round_and_no_terminate(environment, owner, real_machines):
    cluster = create_cluster(
        environment=environment, name="rcfiles", machine_type=real_machine_type(2), machine_count=2, software="none",
        created_by=owner,
    )
    cluster = drive(cluster, SETTLED, timeout=120)
    assert cluster.status == Status.READY, story(cluster)
    nodes = list(cluster.nodes.select_related("host").order_by("index"))
    flooding, hanging = (handle(real_machines, node) for node in nodes)
    round_budget = settings.NODE_HEALTH_ROUND_SECONDS

    # Every rc file a login or a shell reads, and /etc/environment: the control plane's
    # sessions read none of them, so the nodes are simply healthy.
    plant(flooding, RC_FILES, FLOOD)
    plant(hanging, RC_FILES, HANG)
    for node_handle in (flooding, hanging):
        plant(node_handle, ("/etc/environment",), "BASH_ENV=/root/.bashrc")
    finished, found = within(round_budget, lambda: rounds.check_cluster(cluster.pk))
    assert finished, "a health round waited on a node's rc files"
    assert found == {"node-0": NodeHealth.HEALTHY, "node-1": NodeHealth.HEALTHY}, found

    # What a node's root can always make its sshd run: the round ends within its budget
    # all the same, each node with its verdict.
    plant(flooding, ALWAYS_READ, FLOOD)
    plant(hanging, ALWAYS_READ, HANG)
    for node_handle in (flooding, hanging):
        plant(node_handle, ("/root/.ssh/environment",), "SHLVL=0")
    finished, found = within(round_budget, lambda: rounds.check_cluster(cluster.pk))
    assert finished, "a health round outlasted its budget"
    assert found == {"node-0": NodeHealth.UNREACHABLE, "node-1": NodeHealth.UNREACHABLE}, found
    details = {f"node-{index}": detail for index, detail in cluster.nodes.values_list("index", "health_detail")}
    assert "health check printed more than" in details["node-0"], details
    assert "health check did not finish within" in details["node-1"], details

    # A metrics round: within its budget, and no figures made up for either node.
    finished, answered = within(settings.METRICS_ROUND_SECONDS, lambda: collection.collect_cluster(cluster.pk))
    assert finished, "a metrics round outlasted its budget"
    assert answered == 0 and not NodeSample.objects.filter(cluster=cluster).exists()

    # Terminate: the machines' own stop gets its time, then they are ended from outside.
    assert terminate_cluster(cluster)
    finished, _ = within(2 * operations.STOP_SECONDS + 60, lambda: lifecycle.advance(cluster.pk))
    assert finished, "terminate waited on the nodes"
    cluster.refresh_from_db()
    assert cluster.status == Status.TERMINATED, story(cluster)
    assert not cluster.nodes.filter(released_at__isnull=True).exists()
    assert all(realnodes.running(real_machines / node.host.name) is None for node in Node.objects.filter(cluster=cluster))
