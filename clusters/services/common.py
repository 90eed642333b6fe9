"""What every cluster service shares: the event record, the compare-and-set transition and
the after-commit push (and, when asked, the reconciler's next pass)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.utils import timezone

from audit.recording import Action, record_cluster_action
from clusters import notices
from clusters.models import Cluster, ClusterEvent, NodeHealth
from webhooks import events as webhook_events

SYSTEM = "system"


# A machine that stops (released, replaced, failed) carries no health: the last round's
# verdict was about a running machine, and a stopped one is not checked again.
NO_HEALTH: dict[str, str] = {"health": NodeHealth.UNKNOWN, "health_detail": ""}


def record_event(cluster: Cluster, event: str, message: str, *, actor: str = SYSTEM, reason: str = "",
                 data: dict[str, Any] | None = None, audit: Action | None = None) -> ClusterEvent:
    """The one place a cluster's events are recorded; the lifecycle's events are also sent to
    the workspace's webhook endpoints that want them (webhooks.events), after commit.
    `data`: what the webhook carries besides the cluster (the node, the network test).
    `audit`: the action this event records, written to the workspace's audit log beside it."""
    recorded = ClusterEvent.objects.create(cluster=cluster, event=event, message=message, actor=actor, reason=reason)
    webhook_events.cluster_event(cluster, recorded, data)
    if audit is not None:
        record_cluster_action(recorded, audit, system=actor == SYSTEM)
    return recorded


def after_commit_changed(cluster_id: int, *, advance: bool = False, nodes: Iterable[int] | None = None) -> None:
    """Push the new state to open pages and, when asked, let the reconciler take the next step.
    `nodes`: the ids of the only nodes that changed (None: the cluster or all its nodes did)."""
    changed = None if nodes is None else list(nodes)
    transaction.on_commit(lambda: notices.cluster_changed(cluster_id, changed))
    if advance:
        # The pass is queued by clusters.receivers, which logs a broker that is down instead
        # of raising: the change has committed, and the sweep re-drives the cluster later.
        transaction.on_commit(lambda: notices.pass_wanted.send(sender=None, cluster_id=cluster_id))


def transition(cluster: Cluster, allowed: Iterable[str], to: str, **fields: Any) -> bool:
    """Compare-and-set the status: only one caller can win a given transition."""
    now = timezone.now()
    updated = Cluster.objects.filter(pk=cluster.pk, status__in=list(allowed)).update(
        status=to, status_changed_at=now, **fields
    )
    if updated:
        cluster.status = to
        cluster.status_changed_at = now
        for key, value in fields.items():
            setattr(cluster, key, value)
    return bool(updated)
