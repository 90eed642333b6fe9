"""`make run`'s stack (python -m config.stack, embedded Redis) keeps working after its Redis dies:
the test kills the embedded redis-server by its pid, the stack says it restarted it, and a
create made afterwards is driven to ready."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from accounts.models import Role
from api.keys import create_api_key
from clusters.models import Cluster, Status
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.processes import BASE_DIR, database_url, free_port, stop_stack, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def descendants(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
        for child in children:
            found += [child, *descendants(child)]
    return found


def redis_children(pid: int) -> list[int]:
    """The redis-server processes among `pid`'s descendants."""
    running = []
    for child in descendants(pid):
        try:
            if b"redis-server" in Path(f"/proc/{child}/cmdline").read_bytes():
                running.append(child)
        except OSError:
            pass
    return running


def serving(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/login/", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_stack_restarts_its_embedded_redis_and_a_create_then_becomes_ready(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    # A folder the stack's own user can reach (started as root, its children run as that user;
    # pytest's tmp_path sits in a folder only root enters).
    var = Path(tempfile.mkdtemp(prefix="runcrate-stack-"))
    env.update({"DATABASE_URL": database_url(), "RUNCRATE_VAR_DIR": str(var), "DEBUG": "1",
                "SECRET_KEY": uuid.uuid4().hex * 2, "DEFAULT_PROVIDER": "simulated", "CLUSTER_POLL_SECONDS": "1",
                "SWEEP_INTERVAL_SECONDS": "2", "LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1", "DB_POOL_SIZE": "2",
                "EMAIL_BACKEND": "django.core.mail.backends.locmem.EmailBackend"})
    log = tmp_path / "stack.log"
    stack = subprocess.Popen([sys.executable, "-m", "config.stack", "--port", str(port)], cwd=BASE_DIR, env=env,
                             stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    workspace = WorkspaceFactory()
    owner = MembershipFactory(workspace=workspace, user=UserFactory(username="redis"), role=Role.OWNER).user
    _, raw = create_api_key(workspace=workspace, created_by=owner, name="redis")
    offer = machine_type_with_hosts(4)
    api = httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {raw}"}, timeout=30)
    try:
        assert wait_for(lambda: "is running at" in log.read_text(), 120), log.read_text()
        assert wait_for(lambda: serving(port), 120), log.read_text()[-3000:]
        [redis] = redis_children(stack.pid)
        os.kill(redis, signal.SIGKILL)
        said = f"redis (pid {redis}) exited with -9; restarted it"
        assert wait_for(lambda: said in log.read_text(), 30), log.read_text()[-3000:]
        assert wait_for(lambda: len(redis_children(stack.pid)) == 1, 10)

        time.sleep(1)  # the web server's and workers' next use of Redis reconnects
        created = api.post("/api/v1/clusters", json={"name": "after", "offer_id": offer.pk, "machines": 2})
        assert created.status_code == 201, created.text
        cluster_id = created.json()["data"]["id"]
        assert wait_for(lambda: Cluster.objects.get(pk=cluster_id).status == Status.READY, 120, step=1), (
            Cluster.objects.get(pk=cluster_id).status, log.read_text()[-3000:])
    finally:
        api.close()
        stop_stack(stack)
        shutil.rmtree(var, ignore_errors=True)
