"""The live-status sockets through the real ASGI application: auth, scoping, origin, pushes."""

from __future__ import annotations

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from clusters.models import Cluster, Node, Status
from clusters.services.create import create_cluster
from clusters.services.progress import append_node_logs, update_nodes
from clusters.services.terminate import terminate_cluster
from config.asgi import application

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("isolated_channel_layer", "socket_thread_connections"),
]

ORIGIN = "http://127.0.0.1:8000"
TIMEOUT = 5  # seconds a message may take to arrive; a bound, not a measurement


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def communicator(path: str, cookie: str | None = None, origin: str | None = ORIGIN) -> WebsocketCommunicator:
    headers = []
    if origin:
        headers.append((b"origin", origin.encode()))
    if cookie:
        headers.append((b"cookie", f"{settings.SESSION_COOKIE_NAME}={cookie}".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def receive_until(socket: WebsocketCommunicator, needle: str) -> str:
    """Messages until one contains needle (a push may be preceded by others)."""
    while True:
        message = await socket.receive_from(timeout=TIMEOUT)
        if needle in message:
            return message


@pytest.fixture
def cluster(environment, machine_type, owner) -> Cluster:
    # On a transactional database the create's on_commit runs the (eager) lifecycle: ready.
    cluster = create_cluster(
        environment=environment, name="train", machine_type=machine_type, machine_count=4, created_by=owner
    )
    cluster.refresh_from_db()
    assert cluster.status == Status.READY
    return cluster


@pytest.fixture
def owner_cookie(owner):
    return session_cookie(owner)


@pytest.fixture(autouse=True)
async def close_layer():
    yield
    layer = get_channel_layer()
    if hasattr(layer, "close_pools"):
        await layer.close_pools()


async def terminate(cluster: Cluster, actor: str) -> None:
    assert await database_sync_to_async(terminate_cluster)(cluster, actor=actor)


@pytest.fixture(params=["owner", "developer"])
def member(request):
    return request.getfixturevalue(request.param)


async def test_the_cluster_socket_sends_the_current_state_then_every_change(cluster, member):
    user = member
    socket = communicator(f"/ws/clusters/{cluster.pk}/", await database_sync_to_async(session_cookie)(user))
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    first = await socket.receive_from(timeout=TIMEOUT)
    assert 'id="status-card" hx-swap-oob="true"' in first
    assert 'data-testid="cluster-status">Ready<' in first

    assert 'id="events-list" hx-swap-oob="true"' in first  # the newest events, as the page shows them

    await terminate(cluster, user.username)
    pushed = await receive_until(socket, 'data-testid="cluster-status">Terminated<')
    for part in ("status-card", "nodes-table"):
        assert f'id="{part}" hx-swap-oob="true"' in pushed
    # Only the events recorded since the last push, added at the top of the list.
    assert '<ol id="event-items" hx-swap-oob="afterbegin">' in pushed
    assert "Every machine stopped and was released." in pushed
    assert "Reserved 4 ×" not in pushed
    assert "csrfmiddlewaretoken" not in pushed or 'value="NOTPROVIDED"' in pushed
    await socket.disconnect()


async def test_the_environment_socket_pushes_the_clusters_row(cluster, environment, owner_cookie):
    socket = communicator(f"/ws/environments/{environment.pk}/", owner_cookie)
    connected, _ = await socket.connect(timeout=TIMEOUT)
    assert connected
    await terminate(cluster, "alice")
    row = await receive_until(socket, "Terminat")
    assert row.lstrip().startswith(f'<tr id="cluster-row-{cluster.pk}" hx-swap-oob="true">')
    await socket.disconnect()


async def test_a_push_reaches_only_that_clusters_watchers(cluster, environment, machine_type, owner_cookie, owner):
    other = await database_sync_to_async(create_cluster)(
        environment=environment, name="other", machine_type=machine_type, machine_count=2, created_by=owner
    )
    socket = communicator(f"/ws/clusters/{other.pk}/", owner_cookie)
    assert (await socket.connect(timeout=TIMEOUT))[0]
    await socket.receive_from(timeout=TIMEOUT)  # the current state
    await terminate(cluster, "alice")
    await terminate(other, "alice")
    # Pushes arrive in order: had train's reached this socket, it would come before other's.
    received: list[str] = []
    while 'data-testid="cluster-status">Terminated<' not in (received[-1] if received else ""):
        received.append(await socket.receive_from(timeout=TIMEOUT))
    # Each push carries the events recorded since the last one, and their ids tell the two apart.
    trains = await database_sync_to_async(lambda: list(cluster.events.values_list("pk", flat=True)))()
    others = await database_sync_to_async(lambda: list(other.events.values_list("pk", flat=True)))()
    pushed = "".join(received)
    assert any(f'id="event-{pk}"' in pushed for pk in others)
    assert not any(f'id="event-{pk}"' in pushed for pk in trains)
    await socket.disconnect()


@pytest.mark.parametrize("path", ["cluster", "environment"])
async def test_anonymous_is_refused(cluster, environment, path):
    target = f"/ws/clusters/{cluster.pk}/" if path == "cluster" else f"/ws/environments/{environment.pk}/"
    connected, code = await communicator(target).connect(timeout=TIMEOUT)
    assert (connected, code) == (False, 4403)


@pytest.mark.parametrize("path", ["cluster", "environment"])
async def test_another_workspaces_cluster_or_environment_is_refused(cluster, environment, outsider, path):
    target = f"/ws/clusters/{cluster.pk}/" if path == "cluster" else f"/ws/environments/{environment.pk}/"
    cookie = await database_sync_to_async(session_cookie)(outsider)
    connected, code = await communicator(target, cookie).connect(timeout=TIMEOUT)
    assert (connected, code) == (False, 4403)


async def test_a_cluster_that_does_not_exist_is_refused(owner_cookie):
    connected, code = await communicator("/ws/clusters/999999/", owner_cookie).connect(timeout=TIMEOUT)
    assert (connected, code) == (False, 4403)


@pytest.mark.parametrize("origin", ["http://evil.example", "https://127.0.0.1.evil.example:8000", None])
async def test_a_foreign_or_missing_origin_is_refused(cluster, owner_cookie, origin):
    connected, _ = await communicator(f"/ws/clusters/{cluster.pk}/", owner_cookie, origin=origin).connect(timeout=TIMEOUT)
    assert not connected


async def test_a_removed_member_can_no_longer_subscribe(cluster, developer):
    from accounts.models import Membership

    cookie = await database_sync_to_async(session_cookie)(developer)
    await database_sync_to_async(Membership.objects.filter(user=developer).delete)()
    connected, code = await communicator(f"/ws/clusters/{cluster.pk}/", cookie).connect(timeout=TIMEOUT)
    assert (connected, code) == (False, 4403)


@pytest.mark.parametrize("watch", ["cluster", "environment"])
async def test_removing_a_member_closes_their_open_sockets_and_keeps_everyone_elses(
    cluster, environment, developer, owner, owner_cookie, watch
):
    from accounts import services as accounts
    from accounts.models import Membership

    path = f"/ws/clusters/{cluster.pk}/" if watch == "cluster" else f"/ws/environments/{environment.pk}/"
    theirs = communicator(path, await database_sync_to_async(session_cookie)(developer))
    ours = communicator(path, owner_cookie)
    assert (await theirs.connect(timeout=TIMEOUT))[0] and (await ours.connect(timeout=TIMEOUT))[0]

    def remove() -> None:
        by = Membership.objects.get(user=owner)
        accounts.remove_member(by=by, membership=Membership.objects.get(user=developer, workspace=by.workspace))

    await database_sync_to_async(remove)()

    while True:  # messages already on their way may come first; then the close
        message = await theirs.receive_output(timeout=TIMEOUT)
        if message["type"] == "websocket.close":
            break
    assert message["code"] == 4403
    await terminate(cluster, "alice")
    assert await receive_until(ours, "Terminat")
    await ours.disconnect()


async def test_a_node_change_pushes_that_nodes_changed_cell_alone(cluster, owner_cookie):
    socket = communicator(f"/ws/clusters/{cluster.pk}/", owner_cookie)
    assert (await socket.connect(timeout=TIMEOUT))[0]
    await socket.receive_from(timeout=TIMEOUT)  # the current state
    node = await database_sync_to_async(cluster.nodes.get)(index=2)
    await database_sync_to_async(update_nodes)(cluster.pk, [(node, {"detail": "Its disk is full."})])
    card = await socket.receive_from(timeout=TIMEOUT)
    rows = await socket.receive_from(timeout=TIMEOUT)
    assert 'id="status-card" hx-swap-oob="true"' in card and 'id="nodes-table"' not in card
    # Only its State cell (state and detail) changed: that cell travels, not the row.
    assert rows.startswith('<td data-label="State" id="node-2-state" hx-swap-oob="true">'), rows
    assert "<tr " not in rows and rows.count('hx-swap-oob="true"') == 1
    assert "Its disk is full." in rows
    await socket.disconnect()


async def test_a_node_leaving_ready_takes_replace_off_the_page_in_the_status_card_alone(cluster, owner_cookie):
    socket = communicator(f"/ws/clusters/{cluster.pk}/", owner_cookie)
    assert (await socket.connect(timeout=TIMEOUT))[0]
    now = await socket.receive_from(timeout=TIMEOUT)
    assert "Replace node-1" in now and "data-replace-nodes" in now
    node = await database_sync_to_async(cluster.nodes.get)(index=2)
    await database_sync_to_async(update_nodes)(cluster.pk, [(node, {"state": Node.State.INSTALL_FAILED})])
    card = await socket.receive_from(timeout=TIMEOUT)
    assert 'id="status-card"' in card and "data-replace-nodes" not in card
    cells = await socket.receive_from(timeout=TIMEOUT)
    assert "<tr " not in cells and "Install failed" in cells
    await socket.disconnect()


async def test_new_log_lines_reach_the_page_alone_after_what_it_holds(cluster, owner_cookie):
    nodes = await database_sync_to_async(lambda: {n.index: n.pk for n in cluster.nodes.all()})()
    await database_sync_to_async(append_node_logs)(cluster.pk, {nodes[1]: [("install", "unpacking slurm")]})
    socket = communicator(f"/ws/clusters/{cluster.pk}/", owner_cookie)
    assert (await socket.connect(timeout=TIMEOUT))[0]
    assert "unpacking slurm" in await socket.receive_from(timeout=TIMEOUT)
    await database_sync_to_async(append_node_logs)(cluster.pk, {nodes[1]: [("install", "slurmd started")]})
    card = await socket.receive_from(timeout=TIMEOUT)
    assert '<pre class="log" id="node-1-log-text" data-keep="4000" hx-swap-oob="beforeend">' in card
    assert "slurmd started" in card and "unpacking slurm" not in card
    await socket.disconnect()
