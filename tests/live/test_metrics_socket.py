"""A metrics round reaches the open cluster page over its socket: the points for the charts
and the refreshed top table, as htmx out-of-band swaps."""

from __future__ import annotations

import html
import json

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from clusters.models import Cluster, Status
from clusters.nodeops.metrics import NodeReading
from clusters.services.create import create_cluster
from metrics import collection
from metrics import services as metrics
from tests.live.test_sockets import communicator, receive_until, session_cookie

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("isolated_channel_layer", "socket_thread_connections"),
]


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def reading(busy: float, total: float) -> NodeReading:
    return NodeReading(exporter="up", cpu_seconds={"user": busy, "idle": total - busy},
                       memory_total_bytes=8 * 2**30, memory_available_bytes=2 * 2**30, disks={"/": (100, 50)})


def round_of(cluster: Cluster, busy: float, total: float) -> None:
    nodes = collection.collected_nodes(cluster)
    samples = metrics.record_round(cluster, nodes, {n.name: reading(busy * (n.index + 1), total) for n in nodes},
                                   timezone.now())
    collection.push(cluster, nodes, samples)


async def test_a_round_pushes_points_and_the_top_table_to_the_cluster_page(environment, machine_type, owner):
    cluster = await database_sync_to_async(create_cluster)(
        environment=environment, name="train", machine_type=machine_type, machine_count=2, created_by=owner)
    await database_sync_to_async(cluster.refresh_from_db)()
    assert cluster.status == Status.READY
    await database_sync_to_async(round_of)(cluster, 0, 100)
    socket = communicator(f"/ws/clusters/{cluster.pk}/", await database_sync_to_async(session_cookie)(owner))
    connected, _ = await socket.connect()
    assert connected
    await database_sync_to_async(round_of)(cluster, 30, 200)
    message = await receive_until(socket, 'id="metrics-push"')
    assert 'hx-swap-oob="true"' in message and 'id="metrics-top"' in message
    payload = json.loads(html.unescape(message.split('data-payload="', 1)[1].split('"', 1)[0]))
    assert {p["node"]: p["cpu_percent"] for p in payload["points"]} == {"node-0": 30.0, "node-1": 60.0}
    assert "Busiest: <strong>node-1</strong> (60% CPU)" in message
    await socket.disconnect()
