"""Live status, the sending half: tell whoever watches a cluster that it changed.

The bottom of the clusters app: it imports only the models. Services call it after a commit;
it sends a small notice ("cluster 7 changed, nodes 3 and 4") to the cluster's group and its
environment's group, and each socket renders what its page lacks (clusters.live, in the
consumer). It renders nothing itself, so nothing that changes a cluster depends on pages.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections.abc import Iterable
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.dispatch import Signal

from clusters.models import Cluster

log = logging.getLogger(__name__)

# Work wanted after a commit. The services say what they want done next; clusters.receivers
# (connected in ClustersConfig.ready) queues the Celery task that does it. The tasks run the
# lifecycle, which calls the services: sent as a signal, that is not an import loop.
pass_wanted = Signal()  # cluster_id: the reconciler's next pass over the cluster
network_test_wanted = Signal()  # test_id: a queued network test to run
volume_sync_wanted = Signal()  # cluster_id: save the head's volume folder now

CHANGED = "cluster.changed"  # handled by consumers' cluster_changed
NETWORK_CHANGED = "network.changed"  # handled by ClusterConsumer.network_changed


def cluster_group(cluster_id: int) -> str:
    return f"cluster-{cluster_id}"


def environment_group(environment_id: int) -> str:
    return f"environment-{environment_id}"


def user_group(user_id: int) -> str:
    """Every live socket of one user, whatever it watches: told to re-check its access."""
    return f"user-{user_id}"


def revoke_user_sockets(user_id: int) -> None:
    """The user lost access somewhere (removed from a workspace): each of their sockets
    checks again and closes if it no longer may watch what it watches."""
    send_to_group(user_group(user_id), {"type": "access.changed"})


class _PushLoop:
    """The event loop this process's synchronous code pushes through.

    `async_to_sync(layer.group_send)` in a thread without a loop starts an event loop, and
    channels_redis a connection to Redis, for each message, and closes both: ~2.3 ms of CPU
    a push, and a cluster's progress is pushed to two groups every second it has output. One
    loop in a daemon thread keeps the layer's connections from push to push (~0.2 ms). A
    forked child (a Celery worker) starts a loop of its own."""

    TIMEOUT = 2.0  # a Redis that accepts and never answers holds up the committing thread this long

    def __init__(self) -> None:
        self._forget()
        # The parent's loop thread does not exist in a forked child, and its lock may have
        # been held by another thread at the fork.
        os.register_at_fork(after_in_child=self._forget)

    def _forget(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="pushes", daemon=True).start()
                self._loop = loop
            return self._loop

    def send(self, layer: Any, group: str, message: dict) -> None:
        future = asyncio.run_coroutine_threadsafe(layer.group_send(group, message), self._running_loop())
        try:
            future.result(timeout=self.TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise


_PUSH_LOOP = _PushLoop()


def send_to_group(group: str, message: dict) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        if isinstance(layer, InMemoryChannelLayer):
            # Its queues belong to the loop of the consumers reading them (tests, `manage.py`).
            async_to_sync(layer.group_send)(group, message)
        else:
            _PUSH_LOOP.send(layer, group, message)
    except Exception:  # a missed push must never undo a committed change
        log.exception("push to %s failed", group)


def broadcast(group: str, html: str) -> None:
    """Send ready-made HTML to every socket of a group."""
    send_to_group(group, {"type": "html.update", "html": html})


def cluster_changed(cluster_id: int, nodes: Iterable[int] | None = None) -> None:
    """After a commit: `nodes` are the ids of the nodes that changed, None when all did."""
    environment_id = Cluster.objects.filter(pk=cluster_id).values_list("environment_id", flat=True).first()
    if environment_id is None:
        return
    notice = {"type": CHANGED, "cluster_id": cluster_id, "nodes": None if nodes is None else sorted(set(nodes))}
    send_to_group(cluster_group(cluster_id), notice)
    send_to_group(environment_group(environment_id), notice)


def network_changed(cluster_id: int) -> None:
    """After a commit: the cluster's network test changed (a round of pairs, its outcome)."""
    send_to_group(cluster_group(cluster_id), {"type": NETWORK_CHANGED, "cluster_id": cluster_id})
