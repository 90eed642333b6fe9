"""What clusters does when it is told something happened, connected in ClustersConfig.ready:
an app below says so with a signal (accounts.signals), and the services say what work they
want after a commit (clusters.notices), which the Celery tasks take up here."""

from __future__ import annotations

from django.db import transaction

from clusters import tasks
from clusters.network_test import tasks as network_test_tasks
from clusters.notices import revoke_user_sockets


def close_sockets_of_ended_membership(*, user_id: int, **_: object) -> None:
    """accounts.signals.membership_ended: the member's open pages stop receiving this
    workspace's pushes as soon as they are out."""
    transaction.on_commit(lambda: revoke_user_sockets(user_id))


def queue_pass(*, cluster_id: int, **_: object) -> None:
    """clusters.notices.pass_wanted: the reconciler takes the cluster's next step."""
    tasks.queue_advance(cluster_id)


def queue_network_test(*, test_id: int, **_: object) -> None:
    """clusters.notices.network_test_wanted."""
    network_test_tasks.queue_network_test(test_id)


def queue_volume_sync(*, cluster_id: int, **_: object) -> None:
    """clusters.notices.volume_sync_wanted."""
    tasks.queue_volume_sync(cluster_id)
