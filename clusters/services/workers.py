"""Growing a ready cluster: workers added, each billed from the moment it is up; one that
never comes up is released on its own."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from accounts.models import Workspace
from audit.recording import Action
from billing import services as billing
from clusters import rules
from clusters.errors import ClusterError, Conflict
from clusters.models import Cluster, Node, NodeStep, Reason, Software, Status
from clusters.quotas import check_quotas
from clusters.services.common import NO_HEALTH, SYSTEM, after_commit_changed, record_event
from clusters.services.create import check_balance
from clusters.services.replace import replacement_in_progress
from offers import inventory


def add_workers(cluster: Cluster, count: int, *, actor: str = SYSTEM) -> list[Node]:
    """Grow a ready cluster by `count` machines of the same type. Each new worker is billed
    from the moment it is up and joined; one that fails to come up is released on its own."""
    if not isinstance(count, int) or count < 1:
        raise ClusterError("invalid_count", "Add at least one worker.", field="count")
    with transaction.atomic():
        # Cluster before workspace (the lock order in docs/architecture.md): a terminate holds
        # the cluster while it ends usage, and metering holds usage while it locks workspaces.
        cluster = Cluster.objects.select_for_update(of=("self",)).select_related("machine_type").get(pk=cluster.pk)
        # The workspace lock serialises this balance check with creates and other adds.
        workspace = Workspace.objects.select_for_update().get(pk=cluster.workspace_id)
        if cluster.status != Status.READY:
            raise Conflict("not_ready", f"Workers can be added to a ready cluster; {cluster.name} is {cluster.status}.")
        if (problem := replacement_in_progress(cluster)) is not None:
            raise problem
        total = cluster.machine_count + count
        if (problem := rules.worker_count_problem(cluster, count)) is not None:
            raise problem
        check_balance(workspace, cluster.price_per_machine_hour * total)
        check_quotas(cluster.environment, cluster.created_by_id, adding_gpus=cluster.machine_type.gpus_per_machine * count,
                     adding_per_hour=cluster.price_per_machine_hour * count)
        hosts = inventory.reserve_hosts(cluster.machine_type, count)
        if hosts is None:
            raise Conflict(
                "offer_unavailable",
                f"{count} more {cluster.machine_type} machine(s) are not free now "
                f"({inventory.free_host_count(cluster.machine_type)} free).",
                field="count",
            )
        live = cluster.nodes.filter(released_at__isnull=True)
        next_index = max(live.values_list("index", flat=True), default=-1) + 1
        nodes = Node.objects.bulk_create(
            [Node(cluster=cluster, index=next_index + i, host=host) for i, host in enumerate(hosts)]
        )
        Cluster.objects.filter(pk=cluster.pk).update(machine_count=total)
        names = ", ".join(f"node-{next_index + i}" for i in range(count))
        record_event(cluster, "workers_added", f"Adding {names}; each is billed from the moment it is up.", actor=actor,
                     audit=Action("cluster.add_workers", {"machines": cluster.machine_count}, {"machines": total}))
        after_commit_changed(cluster.pk, advance=True)
        return nodes


def mark_workers_joined(cluster: Cluster, workers: list[Node]) -> bool:
    """New workers are up and every node reaches them: bill each from now."""
    with transaction.atomic():
        # The grow step runs under the lease, but a terminate does not take it. Lock the
        # cluster row and start billing only while it is still ready: after terminate_cluster
        # has ended the usage, a new interval would stay open and be billed forever.
        if not Cluster.objects.select_for_update().filter(pk=cluster.pk, status=Status.READY).exists():
            return False
        now = timezone.now()
        state = Node.State.READY if cluster.software == Software.NONE else Node.State.JOINED
        Node.objects.filter(pk__in=[w.pk for w in workers], billing_started_at__isnull=True).update(
            state=state, joined_at=now, billing_started_at=now,
            **({"step": NodeStep.JOINED} if state == Node.State.JOINED else {"ready_at": now, "step": NodeStep.READY}),
        )
        billing.start_usage(cluster, workers, now)
        names = ", ".join(w.name for w in workers)
        record_event(cluster, "workers_joined", f"{names} joined the private network; billing started for them.")
        after_commit_changed(cluster.pk, advance=True)
        return True


def mark_workers_ready(cluster: Cluster, workers: list[Node]) -> None:
    with transaction.atomic():
        Node.objects.filter(pk__in=[w.pk for w in workers]).update(
            state=Node.State.READY, ready_at=timezone.now(), step=NodeStep.READY
        )
        record_event(cluster, "workers_ready", f"{', '.join(w.name for w in workers)} ready.")
        after_commit_changed(cluster.pk)


def release_worker(cluster: Cluster, worker: Node, detail: str) -> None:
    """A worker that never came up is given back alone; the running cluster is untouched and
    the worker was never billed."""
    with transaction.atomic():
        updated = Node.objects.filter(pk=worker.pk, released_at__isnull=True, billing_started_at__isnull=True).update(
            state=Node.State.FAILED, detail=detail[:255], released_at=timezone.now(), step=NodeStep.RELEASED, **NO_HEALTH
        )
        if not updated:
            return
        inventory.quarantine_hosts({worker.host_id: f"worker {worker.name} of cluster #{cluster.pk} did not come up: {detail}"})
        inventory.release_hosts([worker.host_id])
        Cluster.objects.filter(pk=cluster.pk).update(machine_count=F("machine_count") - 1)
        record_event(
            cluster, "worker_failed", f"{worker.name} did not come up ({detail}); it was released and not charged.",
            reason=Reason.BOOT_FAILED,
        )
        after_commit_changed(cluster.pk)
