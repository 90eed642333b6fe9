"""Pushes from synchronous code (the lifecycle, services after a commit) on a real Redis: they
reuse the channel layer's connections from push to push, and survive Redis going away."""

from __future__ import annotations

import asyncio

import pytest
import redis
from channels.layers import get_channel_layer

from clusters.notices import send_to_group
from tests.live.processes import RedisServer


@pytest.fixture
def server(tmp_path, settings):
    server = RedisServer(tmp_path)
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [server.url]}}
    }
    yield server
    server.stop()


def subscribe(group: str) -> str:
    layer = get_channel_layer()

    async def add() -> str:
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        return channel

    return asyncio.run(add())


def received(channel: str) -> list[str]:
    layer = get_channel_layer()

    async def drain() -> list[str]:
        got = []
        try:
            while True:
                got.append((await asyncio.wait_for(layer.receive(channel), 1))["text"])
        except TimeoutError:
            return got

    return asyncio.run(drain())


def connections_accepted(server: RedisServer) -> int:
    return redis.Redis.from_url(server.url).info("stats")["total_connections_received"]


def test_pushes_reuse_their_connection_to_redis(server):
    channel = subscribe("cluster-1")
    before = connections_accepted(server)
    for i in range(20):
        send_to_group("cluster-1", {"type": "cluster.changed", "text": str(i)})
    # One for the pushes' pool, one for this count: not one a push.
    assert connections_accepted(server) - before <= 2
    assert received(channel) == [str(i) for i in range(20)]


def test_a_push_while_redis_is_down_is_dropped_and_the_next_one_after_it_arrives(server, caplog):
    subscribe("cluster-2")
    send_to_group("cluster-2", {"type": "cluster.changed", "text": "before"})
    server.stop()
    send_to_group("cluster-2", {"type": "cluster.changed", "text": "lost"})
    assert "push to cluster-2 failed" in caplog.text
    server.start()
    channel = subscribe("cluster-2")
    send_to_group("cluster-2", {"type": "cluster.changed", "text": "after"})
    assert received(channel) == ["after"]


def test_a_forked_worker_pushes_through_a_loop_of_its_own(server):
    # A Celery prefork child inherits the parent's push loop object, not the thread running it.
    import os

    channel = subscribe("cluster-3")
    send_to_group("cluster-3", {"type": "cluster.changed", "text": "parent"})
    pid = os.fork()
    if pid == 0:  # the child: push, and say by the exit status whether it returned
        try:
            send_to_group("cluster-3", {"type": "cluster.changed", "text": "child"})
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert received(channel) == ["parent", "child"]
