from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from collections.abc import Set as AbstractSet

import pytest

from clusters import lifecycle
from clusters.models import Cluster, Status
from offers.models import Host
from tests.factories import MachineTypeFactory


@contextlib.contextmanager
def terminal_stdin() -> Iterator[int]:
    """A stdin like a person's terminal: open, and empty until the command is done. srun sends
    its stdin to every task, and on a busy node Slurm 22.05 can lose a step to the end of an
    empty stdin (docs/nodeops.md "Slurm"); a person at a prompt never sends that end."""
    read, write = os.pipe()
    try:
        yield read
    finally:
        os.close(read)
        os.close(write)


@pytest.fixture
def local_machines(settings, tmp_path):
    """The `local` provider's loopback sandboxes (machines without namespaces) under a
    temporary directory."""

    settings.LOCAL_MACHINES_DIR = str(tmp_path / "machines")
    settings.LOCAL_NODES = "sandbox"
    yield tmp_path / "machines"
    from clusters.providers.local.provider import SandboxProvider

    provider = SandboxProvider()
    for host in Host.objects.all():
        provider.release(type("N", (), {"host": host})())


def local_machine_type(count: int, *, block: int, kind: str = "vm", **kwargs):
    machine_type = MachineTypeFactory(provider="local", kind=kind, **kwargs)
    for i in range(count):
        Host.objects.create(
            machine_type=machine_type, name=f"local-{block}-{i}", address=f"127.79.{block}.{i + 1}", port=2222,
        )
    return machine_type


def drive(cluster: Cluster, until: AbstractSet[str], timeout: float = 90) -> Cluster:
    """Run the reconciler as the worker would, until the cluster reaches one of `until`."""
    deadline = time.monotonic() + timeout
    while True:
        lifecycle.advance(cluster.pk)
        cluster.refresh_from_db()
        if cluster.status in until or time.monotonic() > deadline:
            return cluster
        time.sleep(0.2)


SETTLED = {Status.READY, Status.DEGRADED, Status.FAILED, Status.TERMINATED}
