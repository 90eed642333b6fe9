"""Redis stalls (a private redis-server this test starts, then stops with SIGSTOP: it accepts
connections and never answers) during a create: the create answers within seconds, once, and
the cluster is driven on by the sweep when Redis answers again."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from django.db import connections
from django.test import Client

from accounts.models import Role
from api.keys import create_api_key
from clusters import tasks
from clusters.models import Cluster
from config.cache import redis_cache
from tests.factories import MembershipFactory, UserFactory, WorkspaceFactory, machine_type_with_hosts
from tests.live.processes import RedisServer, publish_to

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# Far above what a create takes with Redis answering, far below the "hung past 50 s" it was.
ANSWER_WITHIN_SECONDS = 30


@pytest.fixture
def stalled_redis(tmp_path, settings):
    server = RedisServer(tmp_path)
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [server.url]}}
    }
    settings.CACHES = {"default": redis_cache(server.url)}
    restore = publish_to(server.url)
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield server
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        restore()
        server.stop()


def test_a_create_during_a_redis_stall_answers_within_seconds_and_only_once(stalled_redis):
    workspace = WorkspaceFactory()
    membership = MembershipFactory(workspace=workspace, user=UserFactory(username="stall"), role=Role.OWNER)
    _, raw = create_api_key(workspace=workspace, created_by=membership.user, name="stall")
    offer = machine_type_with_hosts(4)
    answers: list = []

    def create() -> None:
        try:
            client = Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {raw}")
            answers.append(client.post("/api/v1/clusters", {"name": "stalled", "offer_id": offer.pk, "machines": 2},
                                       content_type="application/json"))
        finally:
            connections.close_all()

    thread = threading.Thread(target=create, daemon=True)
    thread.start()
    thread.join(ANSWER_WITHIN_SECONDS)
    assert not thread.is_alive(), "the create was still waiting on Redis"
    [response] = answers
    assert response.status_code == 201, response.content
    assert Cluster.objects.filter(name="stalled").count() == 1
    # Its pass was never published: once Redis answers again, the next sweep queues it.
    os.kill(stalled_redis.process.pid, signal.SIGCONT)
    assert tasks.sweep_clusters() == 1
