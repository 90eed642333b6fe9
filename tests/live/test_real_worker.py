"""The lifecycle as production runs it, under REDIS_URL: a cluster created through the API is
queued on the real Redis broker and brought to ready on the local sandbox provider by a real
Celery worker process (this process runs no task and never drives the reconciler), and the
API's rate limiter counts in the real Redis cache.

The rest of the suite keeps eager tasks and the per-process memory cache (config/settings.py):
its tests drive each step by hand and start with empty counters."""

from __future__ import annotations

import uuid

import pytest
import redis as redis_py
from django.conf import settings
from django.test import Client

from accounts.models import Role
from api.keys import create_api_key
from clusters.models import Cluster, Status
from clusters.providers.local.sandbox import find_sshd
from config.celery import app
from offers.models import Host
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory
from tests.live.processes import Processes, publish_to, wait_for
from tests.providers.conftest import local_machine_type

REDIS_URL = settings.REDIS_URL or ""

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not REDIS_URL, reason="needs REDIS_URL (the real broker and cache)"),
    pytest.mark.skipif(find_sshd() is None, reason="OpenSSH sshd is not installed (apt-get install openssh-server)"),
]


@pytest.fixture
def prefix():
    """Keys of this test alone on the shared Redis: queues, cache entries and channels."""
    value = f"test-{uuid.uuid4().hex[:12]}"
    yield value
    client = redis_py.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{value}*"):
        client.delete(key)
    client.close()


@pytest.fixture
def on_real_redis(settings, prefix):
    """This process's cache on Redis and its tasks published to the Redis broker, not run inline."""
    settings.CACHES = {"default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL, "KEY_PREFIX": prefix,
    }}
    restore = publish_to(settings.CELERY_BROKER_URL, key_prefix=f"{prefix}:")
    yield
    restore()


@pytest.fixture
def worker(tmp_path, prefix, on_real_redis):
    machines = tmp_path / "machines"
    stack = Processes(
        tmp_path, REDIS_URL, CELERY_KEY_PREFIX=f"{prefix}:", CHANNEL_PREFIX=prefix, CACHE_PREFIX=prefix,
        LOCAL_NODES="sandbox", LOCAL_MACHINES_DIR=str(machines),
    )
    stack.worker("lifecycle")
    yield stack
    stack.stop()
    # A cluster that did not terminate leaves its loopback sshd servers: stop them as release does.
    from clusters.providers.local.provider import SandboxProvider

    settings.LOCAL_MACHINES_DIR, settings.LOCAL_NODES = str(machines), "sandbox"
    provider = SandboxProvider()
    for host in Host.objects.filter(machine_type__provider="local"):
        provider.release(type("N", (), {"host": host})())


@pytest.fixture
def api(db):
    workspace = WorkspaceFactory(credit_balance=1000)
    membership = MembershipFactory(workspace=workspace, user=UserFactory(username="worker"), role=Role.OWNER)
    _, raw = create_api_key(workspace=workspace, created_by=membership.user, name="worker")
    return Client(HTTP_AUTHORIZATION=f"Bearer {raw}")


def status(cluster_id: int) -> str:
    return Cluster.objects.values_list("status", flat=True).get(pk=cluster_id)


def test_a_cluster_created_through_the_api_is_brought_to_ready_and_terminated_by_a_real_worker(worker, api, settings):
    assert not app.conf.task_always_eager and not settings.CLUSTER_SELF_RESCHEDULE
    machine_type = local_machine_type(2, block=90)

    created = api.post("/api/v1/clusters", {"name": "real", "offer_id": machine_type.pk, "machines": 2},
                       content_type="application/json")
    assert created.status_code == 201, created.content
    cluster_id = created.json()["data"]["id"]
    assert wait_for(lambda: status(cluster_id) == Status.READY, 150), worker.log("lifecycle")
    events = list(Cluster.objects.get(pk=cluster_id).events.values_list("event", flat=True))
    assert "ready" in events, events

    assert api.delete(f"/api/v1/clusters/{cluster_id}").status_code == 202
    assert wait_for(lambda: status(cluster_id) == Status.TERMINATED, 90), worker.log("lifecycle")


def test_the_api_rate_limit_counts_in_the_redis_cache(on_real_redis, api, settings, prefix):
    settings.API_RATE_LIMIT = 3
    codes = [api.get("/api/v1/clusters").status_code for _ in range(5)]
    assert codes == [200, 200, 200, 429, 429]
    client = redis_py.Redis.from_url(REDIS_URL)
    [key] = list(client.scan_iter(f"{prefix}:*rate:api:*"))
    assert int(client.get(key) or 0) == 5
    client.close()
