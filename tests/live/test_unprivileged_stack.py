"""`make run`'s stack started as root, as `make run` starts it (python -m config.stack, embedded
Redis, the `local` provider on real nodes): its web server, workers and beat run as the
control plane's own user, never uid 0, while a real cluster boots to ready through this
computer's host runtime (the one program that runs as root, through its sudo rule), and is
terminated with a clean wipe receipt for each machine."""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import httpx
import pytest

from accounts.models import Role
from api.keys import create_api_key
from clusters.models import Cluster, ClusterEvent, Status
from clusters.providers.local import realnodes
from offers.hostruntime import RUNTIME_PROGRAM, LocalRuntime
from offers.models import Host
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory
from tests.live.processes import BASE_DIR, database_url, free_port, stop_stack, wait_for
from tests.live.test_stack_restarts_redis import descendants, serving
from tests.providers.test_real_nodes import real_machine_type

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

CAN, WHY = realnodes.capability()
STACK_USER = os.environ.get("RUNCRATE_USER", "runcrate")


def _user_exists() -> bool:
    try:
        pwd.getpwnam(STACK_USER)
    except KeyError:
        return False
    return True


def _user_runs_this_python() -> bool:
    if not _user_exists() or os.geteuid() != 0:
        return False
    entry = pwd.getpwnam(STACK_USER)
    try:
        return subprocess.run([sys.executable, "-c", "import django"], user=entry.pw_uid, group=entry.pw_gid,
                              extra_groups=[], capture_output=True, cwd="/").returncode == 0
    except OSError:  # the user may not even reach the interpreter (a Python under /root)
        return False


needs_setup = pytest.mark.skipif(
    not CAN or not _user_exists() or not Path(RUNTIME_PROGRAM).exists() or not _user_runs_this_python(),
    reason=f"needs real nodes ({WHY}), root, bin/host-setup's user {STACK_USER} and its sudo rule, and a "
           f"virtualenv that user can run (make venv PYTHON=/usr/bin/python3)",
)


def uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])  # the real uid; the effective one is checked the same
    raise AssertionError(f"pid {pid} has no Uid line")


def stack_processes(pid: int) -> dict[str, list[tuple[int, int]]]:
    """The stack's web server, workers and beat among `pid`'s descendants: (pid, uid) each."""
    found: dict[str, list[tuple[int, int]]] = {"web": [], "worker": [], "beat": []}
    for child in descendants(pid):
        try:
            words = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{child}/status").read_text()
        except OSError:
            continue
        effective = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[2])
        kind = ("web" if b"config.serve" in words else "worker" if b"worker" in words and b"celery" in words
                else "beat" if b"beat" in words and b"celery" in words else None)
        if kind:
            found[kind].append((child, max(uid_of(child), effective)))
    return found


@needs_setup
def test_make_runs_stack_runs_web_workers_and_beat_as_no_root_while_a_real_cluster_boots_to_ready():
    port = free_port()
    var = Path(tempfile.mkdtemp(prefix="runcrate-stack-"))
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update({"DATABASE_URL": database_url(), "RUNCRATE_VAR_DIR": str(var), "DEBUG": "1",
                "SECRET_KEY": uuid.uuid4().hex * 2, "DEFAULT_PROVIDER": "local", "LOCAL_NODES": "namespaces",
                "CLUSTER_POLL_SECONDS": "1", "SWEEP_INTERVAL_SECONDS": "2", "LOG_LEVEL": "WARNING",
                "PYTHONUNBUFFERED": "1", "DB_POOL_SIZE": "2", "RUNCRATE_USER": STACK_USER,
                "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend"})
    log = var.parent / f"{var.name}.log"
    stack = subprocess.Popen([sys.executable, "-m", "config.stack", "--port", str(port)], cwd=BASE_DIR, env=env,
                             stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    workspace = WorkspaceFactory()
    owner = MembershipFactory(workspace=workspace, user=UserFactory(username="noroot"), role=Role.OWNER).user
    _, raw = create_api_key(workspace=workspace, created_by=owner, name="noroot")
    offer = real_machine_type(3)
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {raw}"}, timeout=60)
    stack_uid = pwd.getpwnam(STACK_USER).pw_uid
    cluster_id = None
    try:
        assert wait_for(lambda: "is running at" in log.read_text(), 180), log.read_text()[-3000:]
        assert wait_for(lambda: serving(port), 180), log.read_text()[-3000:]
        said = log.read_text()
        assert "real Linux nodes in namespaces" in said and f"as {STACK_USER}" in said, said[-3000:]

        created = api.post("/api/v1/clusters", json={"name": "noroot", "offer_id": offer.pk, "machines": 3})
        assert created.status_code == 201, created.text
        cluster_id = created.json()["data"]["id"]
        seen: dict[str, set[int]] = {"web": set(), "worker": set(), "beat": set()}

        def ready_and_watched() -> bool:
            # Every process of the stack, looked at again and again while the machines boot,
            # join and install: none of them is root at any moment.
            for kind, processes in stack_processes(stack.pid).items():
                for pid, uid in processes:
                    assert uid == stack_uid, f"{kind} (pid {pid}) runs as uid {uid}"
                    seen[kind].add(pid)
            return Cluster.objects.get(pk=cluster_id).status in (Status.READY, Status.FAILED, Status.DEGRADED)

        assert wait_for(ready_and_watched, 900, step=1), (Cluster.objects.get(pk=cluster_id).status,
                                                         log.read_text()[-3000:])
        cluster = Cluster.objects.get(pk=cluster_id)
        assert cluster.status == Status.READY, (cluster.status, cluster.failure_reason, log.read_text()[-3000:])
        assert all(seen.values()), seen
        # The machines are real nodes, booted by the runtime as root: their PID 1 is no child of the stack.
        nodes = list(cluster.nodes.select_related("host"))
        assert len(nodes) == 3 and all(node.address.startswith("127.") for node in nodes)
        ours = set(descendants(stack.pid))
        machines = _runtime(var).call("list")["machines"]
        assert sorted(m["key"] for m in machines if m["running"]) == sorted(node.host.name for node in nodes)
        assert not any(m["pid"] in ours for m in machines if m["running"]), "a machine is the stack's own child"

        stopped = api.delete(f"/api/v1/clusters/{cluster_id}")
        assert stopped.status_code in (200, 202, 204), stopped.text
        assert wait_for(lambda: Cluster.objects.get(pk=cluster_id).status == Status.TERMINATED, 300, step=1)
        assert wait_for(lambda: ClusterEvent.objects.filter(cluster_id=cluster_id, event="wipe_receipt").count() == 3,
                        120, step=1), list(ClusterEvent.objects.filter(cluster_id=cluster_id).values_list("event", "message"))
    finally:
        api.close()
        stop_stack(stack)
        if cluster_id is not None and Cluster.objects.get(pk=cluster_id).status != Status.TERMINATED:
            _release(var, list(Host.objects.filter(machine_type=offer)))
        shutil.rmtree(var, ignore_errors=True)
        log.unlink(missing_ok=True)


def _release(var: Path, hosts: list[Host]) -> None:
    """Whatever the stack left running (a failed test), released by its instance's runtime."""
    _runtime(var).call("release", {"keys": [host.name for host in hosts]})


def _runtime(var: Path) -> LocalRuntime:
    """The stack's instance of this computer's runtime (its machines directory is var's)."""
    return LocalRuntime(hashlib.sha256(str((var / "local-machines").resolve()).encode()).hexdigest()[:12])
