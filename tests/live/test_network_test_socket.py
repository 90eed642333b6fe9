"""A network test's pairs reach the cluster's page over its socket as each round is recorded."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async

from clusters.models import NetworkTest
from clusters.network_test.node import PairMeasurement
from clusters.network_test.services import claim_network_test, record_network_pairs
from clusters.services.create import create_cluster
from tests.live.test_sockets import TIMEOUT, close_layer, communicator, receive_until, session_cookie  # noqa: F401

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("isolated_channel_layer")]


@pytest.fixture
def cluster(environment, machine_type, owner):
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=2, created_by=owner
    )
    cluster.refresh_from_db()
    assert cluster.status == "ready"
    return cluster


def running_test(cluster) -> NetworkTest:
    # Created as the runner finds it (queued, then claimed): no task is queued for it here.
    test = NetworkTest.objects.create(cluster=cluster, trigger="on_demand", expected_gbps=1.0,
                                      node_names=["node-0", "node-1"])
    claimed = claim_network_test(test.pk)
    assert claimed is not None
    return claimed


async def test_a_measured_pair_is_pushed_to_the_page_as_it_is_recorded(cluster, developer):
    socket = communicator(f"/ws/clusters/{cluster.pk}/", await database_sync_to_async(session_cookie)(developer))
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    first = await receive_until(socket, 'id="network-card"')
    assert 'data-testid="network-none"' in first and "Run network test" in first

    test = await database_sync_to_async(running_test)(cluster)
    running = await receive_until(socket, 'data-testid="network-test-status">Running<')
    assert running.lstrip().startswith('<div id="network-card" aria-live="polite" hx-swap-oob="true">')

    await database_sync_to_async(record_network_pairs)(
        test, [PairMeasurement("pairs", "node-1", "node-0", 0.37, 0.55)]
    )
    pushed = await receive_until(socket, 'data-testid="pair-node-1-node-0"')
    cell = pushed[pushed.index('data-testid="pair-node-1-node-0"'):]
    assert "<strong>0.37</strong>" in cell[:200] and '<span class="cell-flag">slow</span>' in cell[:300]
    assert "csrfmiddlewaretoken" not in pushed or 'value="NOTPROVIDED"' in pushed
    await socket.disconnect()
