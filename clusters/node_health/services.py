"""Node health: what a health round found, recorded; a node that turns bad or recovers gets
an event and one email (clusters.node_health.rounds runs the rounds)."""

from __future__ import annotations

import datetime as dt

from django.db import transaction
from django.utils import timezone

from clusters import emails as cluster_emails
from clusters.models import Cluster, Node, NodeHealth, Reason, Status
from clusters.services.common import after_commit_changed, record_event
from config.bulk import update_rows

HEALTH_REASONS: dict[str, str] = {
    NodeHealth.UNREACHABLE: Reason.NODE_UNREACHABLE,
    NodeHealth.NETWORK_DOWN: Reason.NODE_NETWORK_DOWN,
    NodeHealth.SOFTWARE_DOWN: Reason.NODE_SOFTWARE_DOWN,
}


def record_node_health(cluster_id: int, found: dict[int, tuple[str, str]], *, checked_at: dt.datetime | None = None) -> list[int]:
    """What one health round found, by node id: (NodeHealth value, detail). Writes every
    checked node's fields in one statement; a node that turns bad gets an event with its
    reason code and one email to the owner, one that recovers an event and one email.
    Returns the ids of the nodes whose health changed.

    The cluster is read, not locked: a round must never wait on (or hold up) a terminate or
    a grow. A node that has left `ready` meanwhile (stopping, replaced) is left alone."""
    checked_at = checked_at or timezone.now()
    with transaction.atomic():
        # Only the node rows, in id order (the lock order of docs/architecture.md; see
        # append_node_logs): a second round for the same cluster waits here, then sees the
        # health this one wrote, so a change is recorded and emailed once.
        nodes = list(
            Node.objects.select_for_update(of=("self",))
            .filter(pk__in=list(found), cluster_id=cluster_id, released_at__isnull=True, state=Node.State.READY)
            .defer("log_tail").order_by("pk")
        )
        cluster = (
            Cluster.objects.select_related("workspace", "created_by").defer("node_secrets").filter(pk=cluster_id).first()
        )
        if cluster is None or cluster.status != Status.READY or not nodes:
            return []
        changed, shown = [], []
        for node in nodes:
            health, detail = found[node.pk]
            detail = detail[:255]
            if health != node.health or detail != node.health_detail:
                shown.append(node.pk)
            if health != node.health:
                _record_health_change(cluster, node, node.health, health, detail, checked_at)
                node.health, node.health_changed_at = health, checked_at
                changed.append(node.pk)
            node.health_detail, node.health_checked_at = detail, checked_at
        update_rows(Node, nodes, ["health", "health_detail", "health_checked_at", "health_changed_at"], locked=True)
        if shown:
            after_commit_changed(cluster_id, nodes=shown)
        return changed


def what_to_do_if_unhealthy(cluster: Cluster, node: Node) -> str:
    """The advice of a node_unhealthy event and email. The head cannot be replaced (it runs the
    controller and exports /shared, which a new machine would not have), so it is never
    suggested for replacement: copy what matters off /shared, then move to a new cluster."""
    if node.index == 0:
        return (
            f"{node.name} is the head (it runs the {cluster.get_software_display()} controller and exports "
            "/shared) and cannot be replaced: if it does not recover, copy what you need off /shared, create a "
            "new cluster and terminate this one."
        )
    return f"replace {node.name} or terminate the cluster if it does not recover."


def _record_health_change(cluster: Cluster, node: Node, old: str, new: str, detail: str, at: dt.datetime) -> None:
    label = NodeHealth(new).label.lower()
    if new in HEALTH_REASONS:
        if old in HEALTH_REASONS:
            # Still bad, differently: the customer already has the email of this episode.
            record_event(cluster, "node_health_changed", f"{node.name} is now {label}: {detail}.", reason=HEALTH_REASONS[new])
            return
        record_event(
            cluster, "node_unhealthy",
            f"{node.name} is {label}: {detail}. The cluster stays ready and the other machines keep running; "
            f"{what_to_do_if_unhealthy(cluster, node)}",
            reason=HEALTH_REASONS[new], data={"node": {"name": node.name, "health": new, "detail": detail}},
        )
        cluster_emails.notify_node_unhealthy(cluster, node, new, detail, at)
    elif new == NodeHealth.HEALTHY and old in HEALTH_REASONS:
        record_event(cluster, "node_recovered", f"{node.name} is healthy again: {detail}.",
                     data={"node": {"name": node.name, "health": new, "detail": detail}})
        cluster_emails.notify_node_recovered(cluster, node, at)
