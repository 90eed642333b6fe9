"""What clusters does when an app below it says something happened (accounts.signals);
connected in ClustersConfig.ready."""

from __future__ import annotations

from django.db import transaction

from clusters.broadcast import revoke_user_sockets


def close_sockets_of_ended_membership(*, user_id: int, **_: object) -> None:
    """accounts.signals.membership_ended: the member's open pages stop receiving this
    workspace's pushes as soon as they are out."""
    transaction.on_commit(lambda: revoke_user_sockets(user_id))
