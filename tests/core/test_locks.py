"""Row locks follow one order (docs/architecture.md): cluster, nodes, usage, workspace, hosts."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from clusters.models import Cluster, Node
from clusters.services.create import create_cluster
from clusters.services.progress import append_node_logs, update_nodes
from offers import lab
from offers.models import Host
from tests.factories import machine_type_with_hosts

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def booting_cluster(environment):
    machine_type = machine_type_with_hosts(4)
    lab.inject(Host.objects.filter(machine_type=machine_type), boot_seconds=600)
    return create_cluster(environment=environment, name="locks", machine_type=machine_type, machine_count=4)


class HeldLock:
    """Another connection holds a row lock until told to let go."""

    def __init__(self, lock) -> None:
        self.lock = lock
        self.held = threading.Event()
        self.release = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        try:
            with transaction.atomic():
                self.lock()
                self.held.set()
                self.release.wait(15)
        finally:
            connection.close()

    def __enter__(self) -> HeldLock:
        self.thread.start()
        assert self.held.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.release.set()
        self.thread.join()


def test_node_output_is_written_while_another_transaction_holds_the_cluster_row(booting_cluster):
    nodes = list(Node.objects.filter(cluster=booting_cluster).order_by("index"))
    with connection.cursor() as cursor:
        # Waiting on the cluster row at all would be the deadlock's first half: fail fast.
        cursor.execute("SET lock_timeout = '2s'")
    try:
        with HeldLock(lambda: Cluster.objects.select_for_update().get(pk=booting_cluster.pk)):
            # lock_timeout makes any wait for the held row an error.
            append_node_logs(booting_cluster.pk, {n.pk: [("join", f"hello from {n.name}")] for n in nodes})
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    tails = list(Node.objects.filter(cluster=booting_cluster).order_by("index").values_list("log_tail", "step"))
    assert all("hello from node-" in tail and step == "join" for tail, step in tails), tails


def test_node_progress_of_a_whole_cluster_is_one_update(booting_cluster):
    nodes = list(Node.objects.filter(cluster=booting_cluster))
    with CaptureQueriesContext(connection) as queries:
        update_nodes(booting_cluster.pk, [(n, {"step": "joining network", "detail": ""}) for n in nodes])
    updates = [q["sql"] for q in queries if q["sql"].startswith('UPDATE "clusters_node"')]
    assert len(updates) == 1, updates
    assert set(Node.objects.filter(cluster=booting_cluster).values_list("step", flat=True)) == {"joining network"}


def test_node_threads_hand_off_output_without_waiting_on_the_database(booting_cluster):
    from clusters.lifecycle import NodeOutput

    nodes = list(Node.objects.filter(cluster=booting_cluster).order_by("index"))
    output = NodeOutput(booting_cluster.pk, nodes, interval=0)
    finished = []

    def node_thread(name: str) -> None:
        for i in range(50):
            output(name, "install", f"{name} line {i}")
        finished.append(time.monotonic())

    # The node rows are locked elsewhere: any write of the output waits until they are free.
    with HeldLock(lambda: list(Node.objects.select_for_update(of=("self",)).filter(cluster=booting_cluster))) as held:
        started = time.monotonic()
        threads = [threading.Thread(target=node_thread, args=(n.name,)) for n in nodes]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=5)
        assert len(finished) == len(nodes)
        assert max(finished) - started < 1, "a node thread waited on the database"
        held.release.set()
        output.close()
    tails = dict(Node.objects.filter(cluster=booting_cluster).values_list("index", "log_tail"))
    assert all(f"node-{i} line 49" in tail for i, tail in tails.items()), tails
