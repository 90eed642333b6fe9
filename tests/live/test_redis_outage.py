"""Redis stops mid-run (a private redis-server this test starts and stops): the worker
survives, committed creates and terminates answer success and are finished by the sweep once
Redis is back, the API's rate limit fails open and new sockets are refused cleanly."""

from __future__ import annotations

import time

import pytest
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from accounts.models import Role
from api.keys import create_api_key
from clusters.models import Cluster, Status
from config.asgi import application
from config.cache import redis_cache
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.processes import Processes, RedisServer, publish_to, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis(tmp_path):
    server = RedisServer(tmp_path)
    yield server
    server.stop()


@pytest.fixture
def on_redis(settings, redis):
    """This process's broker, channel layer and cache all on the private Redis."""
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [redis.url]}}
    }
    settings.CACHES = {"default": redis_cache(redis.url)}  # as production configures it
    restore = publish_to(redis.url)
    yield redis
    restore()


@pytest.fixture
def api(db):
    workspace = WorkspaceFactory()
    membership = MembershipFactory(workspace=workspace, user=UserFactory(username="outage"), role=Role.OWNER)
    _, raw = create_api_key(workspace=workspace, created_by=membership.user, name="outage")
    client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def status(cluster_id: int) -> str:
    return Cluster.objects.get(pk=cluster_id).status


def test_creates_and_terminates_during_an_outage_succeed_and_finish_when_redis_is_back(on_redis, api, tmp_path):
    stack = Processes(tmp_path, on_redis.url, SWEEP_INTERVAL_SECONDS="2")
    try:
        stack.worker("outage")
        stack.beat()
        offer = machine_type_with_hosts(4)
        running = api.post("/api/v1/clusters", {"name": "before", "offer_id": offer.pk, "machines": 2},
                           content_type="application/json")
        assert running.status_code == 201
        before = running.json()["data"]["id"]
        assert wait_for(lambda: status(before) == Status.READY, 30), stack.log("outage")

        on_redis.stop()
        created = api.post("/api/v1/clusters", {"name": "during", "offer_id": offer.pk, "machines": 2},
                           content_type="application/json")
        assert created.status_code == 201, created.content
        terminated = api.delete(f"/api/v1/clusters/{before}")
        assert terminated.status_code == 202, terminated.content
        during = created.json()["data"]["id"]
        time.sleep(3)  # the worker and beat see the broker gone
        assert stack.running["outage"].poll() is None, stack.log("outage")

        on_redis.start()
        assert wait_for(lambda: status(during) == Status.READY, 60), stack.log("outage") + stack.log("beat")
        assert wait_for(lambda: status(before) == Status.TERMINATED, 30), stack.log("outage")
    finally:
        stack.stop()


def test_the_api_rate_limit_lets_requests_through_while_its_cache_is_down(on_redis, api, settings, caplog):
    settings.API_RATE_LIMIT = 5
    on_redis.stop()
    responses = [api.get("/api/v1/clusters").status_code for _ in range(7)]
    assert responses == [200] * 7
    assert "Cache (Redis) unavailable" in caplog.text


def test_sign_in_and_sign_up_work_while_redis_is_down(on_redis, settings, caplog):
    """allauth counts failed sign-ins, sign-ups and emails in the cache: with Redis gone it
    lets them through (logged) instead of answering 500."""
    UserFactory(username="alice", email="alice@example.org", password="correct horse battery")
    on_redis.stop()
    client = Client(raise_request_exception=False)
    wrong = client.post("/login/", {"login": "alice@example.org", "password": "wrong"})
    assert wrong.status_code == 200 and "password" in wrong.text.lower()
    right = client.post("/login/", {"login": "alice@example.org", "password": "correct horse battery"})
    assert right.status_code == 302, right.status_code
    signup = Client(raise_request_exception=False).post(
        "/signup/", {"email": "bob@example.org", "password1": "a long new passphrase", "password2": "a long new passphrase"}
    )
    assert signup.status_code == 302, signup.status_code
    reset = Client(raise_request_exception=False).post("/password/reset/", {"email": "alice@example.org"})
    assert reset.status_code == 302, reset.status_code
    assert "Cache (Redis) unavailable" in caplog.text


async def test_a_socket_opened_while_the_channel_layer_is_down_is_refused_cleanly(
    on_redis, environment, owner, socket_thread_connections
):
    from channels.db import database_sync_to_async

    client = Client()
    await database_sync_to_async(client.force_login)(owner)
    cookie = client.cookies[settings.SESSION_COOKIE_NAME].value
    on_redis.stop()
    socket = WebsocketCommunicator(
        application, f"/ws/environments/{environment.pk}/",
        headers=[(b"origin", b"http://127.0.0.1:8000"), (b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode())],
    )
    connected, code = await socket.connect(timeout=10)
    assert (connected, code) == (False, 1013)
    await socket.disconnect()
