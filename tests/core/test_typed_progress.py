"""A node's step is a label for people: the lifecycle decides on its state and progress
timestamps. Every scenario runs twice, with the labels as shipped and with every label renamed,
and must behave the same; and no code compares or filters on a step."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.conf import settings

from clusters import lifecycle
from clusters.models import Cluster, Node, NodeStep, Status
from clusters.providers.base import StepOutcome
from clusters.providers.simulated import SimulatedProvider
from clusters.services.create import create_cluster
from clusters.services.progress import append_node_logs, retry_install
from clusters.services.replace import replace_node
from offers import lab
from offers.models import Host, HostFault

pytestmark = pytest.mark.django_db(transaction=True)

LABELS = sorted(name for name, value in vars(NodeStep).items() if name.isupper() and isinstance(value, str))


@pytest.fixture(params=["labels as shipped", "every label renamed"])
def labels(request, monkeypatch) -> str:
    if request.param == "every label renamed":
        for number, name in enumerate(LABELS):
            monkeypatch.setattr(NodeStep, name, f"renamed label {number}")
    return request.param


def create(environment, machine_type, count=4, software="slurm") -> Cluster:
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=count, software=software
    )
    cluster.refresh_from_db()
    return cluster


def drive(cluster: Cluster) -> Cluster:
    lifecycle.advance(cluster.pk)
    cluster.refresh_from_db()
    return cluster


def test_there_are_labels_to_rename():
    assert {"CHECKING_READINESS", "REACHES_EVERY_PEER", "REPLACED", "JOINED", "READY"} <= set(LABELS)


def test_an_installed_node_is_only_checked_on_later_passes_even_after_late_output(
    labels, environment, machine_type, monkeypatch
):
    installs: list[list[str]] = []
    checks: list[int] = []
    held = [True]
    install_software = SimulatedProvider.install_software

    def counting_install(self, cluster, nodes):
        installs.append(sorted(n.name for n in nodes))
        return install_software(self, cluster, nodes)

    def slow_readiness(self, cluster, nodes):
        checks.append(len(nodes))
        return StepOutcome(pending={n.name for n in nodes}) if held[0] else StepOutcome.done()

    monkeypatch.setattr(SimulatedProvider, "install_software", counting_install)
    monkeypatch.setattr(SimulatedProvider, "check_ready", slow_readiness)
    cluster = create(environment, machine_type)
    assert cluster.status == Status.INSTALLING
    head = cluster.nodes.get(index=0)
    # The install's last lines land after the node was marked installed.
    append_node_logs(cluster.pk, {head.pk: [("install_software:daemons", "slurmd started")]})

    assert drive(cluster).status == Status.INSTALLING
    held[0] = False
    assert drive(cluster).status == Status.READY
    assert installs == [["node-0", "node-1", "node-2", "node-3"]]
    assert len(checks) >= 3 and set(checks) == {4}
    assert all(n.installed_at is not None and n.ready_at is not None for n in cluster.nodes.all())


def test_a_retried_install_runs_again_on_every_node(labels, environment, machine_type, monkeypatch):
    installs: list[list[str]] = []
    install_software = SimulatedProvider.install_software

    def counting_install(self, cluster, nodes):
        installs.append(sorted(n.name for n in nodes))
        return install_software(self, cluster, nodes)

    monkeypatch.setattr(SimulatedProvider, "install_software", counting_install)
    broken = machine_type.hosts.order_by("id")[3]
    lab.inject(Host.objects.filter(pk=broken.pk), fault=HostFault.INSTALL_FAILS)
    cluster = create(environment, machine_type)
    assert cluster.status == Status.DEGRADED
    lab.inject(Host.objects.filter(pk=broken.pk), fault="")

    retry_install(cluster, actor="alice")

    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    assert installs == [["node-0", "node-1", "node-2", "node-3"]] * 2


def test_machines_every_peer_reaches_count_as_joined_while_one_is_missing(labels, environment, machine_type):
    late = machine_type.hosts.order_by("id").first()
    lab.inject(Host.objects.filter(pk=late.pk), fault=HostFault.NEVER_JOINS)
    cluster = create(environment, machine_type, software="none")
    assert cluster.status == Status.PROVISIONING
    cluster = Cluster.objects.prefetch_related("nodes").get(pk=cluster.pk)
    assert cluster.machine_progress == {"total": 4, "up": 4, "joined": 3}


def test_a_replaced_machine_reads_as_replaced(labels, environment, machine_type):
    cluster = create(environment, machine_type, count=3)
    old = cluster.nodes.get(index=1)

    replace_node(cluster, "node-1", actor="alice")

    old.refresh_from_db()
    assert old.was_replaced
    live = cluster.nodes.filter(released_at__isnull=True)
    assert sorted(live.values_list("index", flat=True)) == [0, 1, 2]
    assert {n.state for n in live} == {Node.State.READY}
    assert not any(n.was_replaced for n in cluster.nodes.exclude(pk=old.pk))


SHIPPED_LABELS = {getattr(NodeStep, name) for name in LABELS}
# What a step read before its labels were words: a table keyed by these is a table of labels.
RAW_STEPS = {"booting", "joining network", "waiting for peers", "reaches every peer", "joined", "installing",
             "checking readiness", "installed", "install queued", "ready", "stopping", "stopped", "released"}
# Statuses and node states share some of those words; a table keyed by them is not about steps.
STEP_WORDS = (SHIPPED_LABELS | RAW_STEPS) - set(Status.values) - set(Node.State.values)


def _is_step(node: ast.AST) -> bool:
    return isinstance(node, ast.Name) and node.id == "step" or isinstance(node, ast.Attribute) and node.attr == "step"


def _step_reads(tree: ast.AST) -> list[int]:
    """Lines comparing a step or a NodeStep label (==, in, startswith, endswith), filtering rows
    on a step, or holding a table keyed by step labels."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            keys = {key.value for key in node.keys if isinstance(key, ast.Constant) and isinstance(key.value, str)}
            if len(keys & STEP_WORDS) >= 2:
                lines.append(node.lineno)
        if isinstance(node, ast.Compare):
            for operand in [node.left, *node.comparators]:
                if isinstance(operand, ast.Attribute) and (
                    operand.attr == "step"
                    or isinstance(operand.value, ast.Name) and operand.value.id in ("NodeStep", "INSTALLED_STEP")
                ) or isinstance(operand, ast.Name) and operand.id == "INSTALLED_STEP":
                    lines.append(node.lineno)
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in ("startswith", "endswith", "removeprefix", "partition", "split") and _is_step(node.func.value):
            lines.append(node.lineno)
        if node.func.attr in ("filter", "exclude", "get") and any(
            (kw.arg or "").split("__")[0] == "step" for kw in node.keywords
        ):
            lines.append(node.lineno)
    return lines


def test_a_prefix_test_or_a_table_of_labels_is_a_step_read(tmp_path):
    code = (
        'TABLE = {"joining network": "Joining", "waiting for peers": "Waiting"}\n'
        'def label(step):\n    if step.startswith("installing "):\n        return step[11:]\n'
        'def other(node):\n    return node.step.endswith("ready")\n'
    )
    assert _step_reads(ast.parse(code)) == [1, 3, 6]


def test_no_code_compares_or_filters_on_a_step_label():
    base = Path(settings.BASE_DIR)
    offending = {}
    for app in ("clusters", "api", "billing", "accounts", "offers", "notifications", "quotes", "metrics", "runcrate_client"):
        for path in (base / app).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            lines = _step_reads(ast.parse(path.read_text(), str(path)))
            if lines:
                offending[str(path.relative_to(base))] = lines
    assert offending == {}
