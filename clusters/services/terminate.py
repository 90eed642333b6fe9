"""Terminating a cluster (every machine together; billing ends at once) and the refusal to
terminate one of its machines on its own."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from audit.recording import Action
from billing import services as billing
from clusters import emails as cluster_emails
from clusters.errors import Conflict
from clusters.models import TERMINABLE_STATUSES, Cluster, Node, NodeStep, Reason, Status
from clusters.services.common import NO_HEALTH, SYSTEM, after_commit_changed, record_event, transition
from offers import inventory


def terminate_cluster(cluster: Cluster, *, actor: str = SYSTEM, reason: str = Reason.USER_REQUESTED) -> bool:
    """Stop every machine together; billing for the whole cluster ends now."""
    with transaction.atomic():
        now = timezone.now()
        was = cluster.status
        if not transition(
            cluster, TERMINABLE_STATUSES, Status.TERMINATING,
            termination_reason=reason,
        ):
            return False
        # Decided on the row, not on `cluster`: it may have been read while provisioning,
        # before the join started billing. The transition's UPDATE holds the row lock, and
        # the join can no longer win (it needs provisioning), so this read is final.
        if Cluster.objects.filter(pk=cluster.pk, billing_started_at__isnull=False).update(billing_ended_at=now):
            cluster.billing_ended_at = now
        live_nodes = Node.objects.filter(cluster=cluster, released_at__isnull=True)
        live_nodes.update(state=Node.State.STOPPING, step=NodeStep.STOPPING)
        # A machine whose billing already stopped (its host went down) keeps that instant.
        live_nodes.filter(billing_started_at__isnull=False, billing_ended_at__isnull=True).update(billing_ended_at=now)
        billing.end_usage(cluster, now)
        label = Reason(reason).label
        record_event(cluster, "terminating", f"Termination requested: {label}. Billing stopped.", actor=actor, reason=reason,
                     audit=Action("cluster.terminate", {"status": was}, {"status": Status.TERMINATING, "reason": reason}))
        after_commit_changed(cluster.pk, advance=True)
        return True


def finish_termination(cluster: Cluster) -> bool:
    with transaction.atomic():
        now = timezone.now()
        if not transition(cluster, [Status.TERMINATING], Status.TERMINATED, terminated_at=now):
            return False
        live_nodes = Node.objects.filter(cluster=cluster, released_at__isnull=True)
        # Only the hosts this cluster still holds: a worker released earlier gave its host
        # back then, and another cluster may hold that host now.
        host_ids = list(live_nodes.values_list("host_id", flat=True))
        live_nodes.update(state=Node.State.STOPPED, released_at=now, step=NodeStep.STOPPED, **NO_HEALTH)
        inventory.release_hosts(host_ids)
        record_event(cluster, "terminated", "Every machine stopped and was released.", reason=cluster.termination_reason)
        transaction.on_commit(lambda: billing.meter_cluster(cluster.pk))
        cluster_emails.notify_terminated(cluster)
        after_commit_changed(cluster.pk)
        return True


def refuse_node_termination(cluster: Cluster, node_name: str) -> None:
    """A node ends with its cluster: there is no way to stop one machine on its own."""
    raise Conflict(
        "node_terminate_refused",
        f"{node_name} cannot be terminated on its own: a cluster's machines start, bill and stop together. "
        f"Terminate the whole cluster {cluster.name!r} instead.",
    )


def terminate_instance(instance: Node) -> None:
    """An instance of the Instances page or the API is a cluster's machine: it is never
    terminated on its own. The refusal names the cluster and how to end it."""
    cluster = instance.cluster
    raise Conflict(
        "node_terminate_refused",
        f"Instance {instance.pk} is {instance.name} of cluster {cluster.name!r}: a cluster's machines start, bill "
        f"and stop together, so one cannot be terminated on its own. Terminate the cluster instead: on its page "
        f"(Terminate cluster), with 'runcrate clusters delete {cluster.pk}', or DELETE /api/v1/clusters/{cluster.pk}.",
        details={"cluster_id": cluster.pk, "cluster_name": cluster.name, "node": instance.name},
    )
