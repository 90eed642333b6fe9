"""Replacing a node.

A machine of the same type is swapped in for one node: it boots, takes that node's name and
private address, joins the mesh and the software, and only then is the old machine stopped.
The new machine is a Node row of its own with the same index and `replacing` set to the old
one until the swap is done (the unique index on (cluster, index) leaves such rows out)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Workspace
from audit.recording import Action
from billing import services as billing
from clusters.errors import ClusterError, Conflict
from clusters.models import Cluster, Node, NodeStep, Reason, Software, Status
from clusters.nodeops.operations import replacement_key_name
from clusters.quotas import check_quotas
from clusters.services.common import NO_HEALTH, SYSTEM, after_commit_changed, record_event
from clusters.services.create import check_balance
from clusters.services.keys import save_node_secrets
from offers import inventory


def _swap_in_progress(cluster: Cluster) -> Node | None:
    return (
        Node.objects.filter(cluster=cluster, released_at__isnull=True, replacing__isnull=False)
        .select_related("replacing").first()
    )


# A degraded cluster's machines are up and billed like a ready one's: replacing the machine
# whose install failed (then retrying the install) is the customer's way out that keeps the
# cluster. Its nodes have settled once each finished its part of the install, well or not.
REPLACEABLE = (Status.READY, Status.DEGRADED)
SETTLED_IN = {
    Status.READY: (Node.State.READY,),
    Status.DEGRADED: (Node.State.READY, Node.State.INSTALLED, Node.State.INSTALL_FAILED),
}


def replacement_in_progress(cluster: Cluster) -> ClusterError | None:
    """One machine is swapped in at a time: the cluster is never billed for more machines than
    it has plus the one being swapped in."""
    swapping = _swap_in_progress(cluster)
    if swapping is None:
        return None
    return Conflict(
        "replacement_in_progress",
        f"{swapping.name} of {cluster.name} is being replaced; wait until the new machine has taken over.",
        details={"node": swapping.name},
    )


def replace_node(cluster: Cluster, node: Node | str, *, actor: str = SYSTEM) -> Node:
    """Reserve a machine of the cluster's type to take over `node` (a name or a node). The old
    machine keeps running, and billing, until the new one is up, joined and ready."""
    name = node if isinstance(node, str) else node.name
    with transaction.atomic():
        # Cluster before workspace (docs/architecture.md): as add_workers, whose balance check
        # and reservation this one must not race.
        cluster = Cluster.objects.select_for_update(of=("self",)).select_related("machine_type").get(pk=cluster.pk)
        workspace = Workspace.objects.select_for_update().get(pk=cluster.workspace_id)
        if cluster.status not in REPLACEABLE:
            raise Conflict(
                "not_ready",
                f"A node can be replaced in a ready or degraded cluster; {cluster.name} is {cluster.status}.",
            )
        live = list(Node.objects.filter(cluster=cluster, released_at__isnull=True).select_related("host").order_by("pk"))
        old = next((n for n in live if n.name == name and n.replacing_id is None), None)
        if old is None:
            raise ClusterError("node_not_found", f"{cluster.name} has no node {name}.", field="node", status=404)
        if (problem := replacement_in_progress(cluster)) is not None:
            raise problem
        if any(n.state not in SETTLED_IN[Status(cluster.status)] for n in live):
            raise Conflict(
                "cluster_changing",
                f"{cluster.name} is adding workers; replace {name} once every machine is ready.",
            )
        if old.index == 0:
            raise Conflict(
                "head_replace_refused",
                f"{name} is the head: it runs the {cluster.get_software_display()} controller and exports /shared, "
                "which a new machine would not have. Only workers can be replaced; to move the head, create a new "
                "cluster and terminate this one.",
                details={"node": name},
            )
        # While the two machines overlap the cluster is billed for one machine more.
        check_balance(workspace, cluster.price_per_machine_hour * (cluster.machine_count + 1))
        # The new machine runs beside the old one until it takes over: it counts against the quotas.
        check_quotas(cluster.environment, cluster.created_by_id, adding_gpus=cluster.machine_type.gpus_per_machine,
                     adding_per_hour=cluster.price_per_machine_hour)
        hosts = inventory.reserve_hosts(cluster.machine_type, 1)
        if hosts is None:
            raise Conflict(
                "offer_unavailable",
                f"No {cluster.machine_type} machine can start now to replace {name}; {name} keeps running. "
                "Try again later.",
                field="node",
            )
        new = Node.objects.create(cluster=cluster, index=old.index, host=hosts[0], replacing=old)
        record_event(
            cluster, "node_replacing",
            f"Replacing {name} with a new machine: it takes {name}'s name and private address {old.private_ip}; "
            f"the old machine takes no new work now and stops once the new one has taken over. The new machine is "
            "billed from when it is up, the old one until it stops.",
            actor=actor, audit=Action("cluster.replace_node", {"node": name, "host": old.host_id}, {"node": name, "host": new.host_id}),
        )
        after_commit_changed(cluster.pk, advance=True)
        return new


def record_drain(cluster: Cluster, node: Node, jobs: list[str] | None) -> None:
    """The node being replaced takes no new work; say which jobs end when the new machine takes over."""
    if jobs is None:
        return
    software = cluster.get_software_display()
    if cluster.software == Software.RAY:
        ending = "Its running tasks keep running until the new machine takes over; new ones go to the other nodes."
    elif jobs:
        listed = ", ".join(jobs[:10]) + (f" and {len(jobs) - 10} more" if len(jobs) > 10 else "")
        ending = f"These jobs run on it and end when the new machine takes over: {listed}."
    else:
        ending = "No job runs on it."
    record_event(cluster, "node_draining", f"{node.name} takes no new {software} jobs while its new machine comes up. {ending}")
    after_commit_changed(cluster.pk)


def mark_replacement_joined(cluster: Cluster, new: Node) -> bool:
    """The new machine is up and every node reaches it under the old one's name: bill it from now."""
    with transaction.atomic():
        # As mark_workers_joined: never open an interval after a terminate ended the usage.
        if not Cluster.objects.select_for_update().filter(pk=cluster.pk, status__in=REPLACEABLE).exists():
            return False
        now = timezone.now()
        if not Node.objects.filter(pk=new.pk, released_at__isnull=True, billing_started_at__isnull=True).update(
            state=Node.State.JOINED, joined_at=now, billing_started_at=now, step=NodeStep.JOINED, detail=""
        ):
            return False
        new.state, new.joined_at, new.billing_started_at, new.step = Node.State.JOINED, now, now, NodeStep.JOINED
        billing.start_usage(cluster, [new], now)
        record_event(
            cluster, "replacement_joined",
            f"The new {new.name} joined the private network as {new.private_ip}; billing started for it.",
        )
        after_commit_changed(cluster.pk, advance=True)
        return True


def mark_replacement_ready(cluster: Cluster, new: Node) -> None:
    with transaction.atomic():
        Node.objects.filter(pk=new.pk, released_at__isnull=True).update(
            state=Node.State.READY, ready_at=timezone.now(), step=NodeStep.STOPPING_OLD_MACHINE, detail=""
        )
        record_event(
            cluster, "replacement_ready",
            f"The new {new.name} is ready and has taken over; stopping the old machine.",
        )
        after_commit_changed(cluster.pk, nodes=[new.pk])


def _move_wireguard_key(cluster: Cluster, new: Node) -> None:
    """The key the new machine joined with becomes its name's key (clusters.providers.fabric)."""
    secrets = dict(cluster.plain_node_secrets)
    keys = dict(secrets.get("wireguard") or {})
    if replacement_key_name(new.pk) in keys:
        keys[new.name] = keys.pop(replacement_key_name(new.pk))
        secrets["wireguard"] = keys
        save_node_secrets(cluster, secrets)


def _forget_wireguard_key(cluster: Cluster, new: Node) -> None:
    secrets = dict(cluster.plain_node_secrets)
    keys = dict(secrets.get("wireguard") or {})
    if keys.pop(replacement_key_name(new.pk), None) is not None:
        secrets["wireguard"] = keys
        save_node_secrets(cluster, secrets)


def finish_replacement(cluster: Cluster, new: Node) -> bool:
    """The old machine has stopped: its billing ends now, its host goes back, and the new
    machine is the node."""
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        if cluster.status not in REPLACEABLE:
            # A terminate took over: it stops and bills both machines.
            return False
        new = Node.objects.select_related("host", "replacing__host").get(pk=new.pk)
        old = new.replacing
        if old is None or new.released_at is not None:
            return False
        now = timezone.now()
        # The old row leaves the live names first: the unique index on (cluster, index) is
        # checked per statement, and the new row joins it below.
        if Node.objects.filter(pk=old.pk, released_at__isnull=True).update(
            # A node whose host went down stopped being billed then (clusters.services.hosts).
            state=Node.State.STOPPED, released_at=now, billing_ended_at=Coalesce("billing_ended_at", Value(now)),
            replaced_at=now, step=NodeStep.REPLACED,
            detail="replaced by a new machine", **NO_HEALTH,
        ):
            billing.end_node_usage([old.pk], now)
            inventory.release_hosts([old.host_id])
        Node.objects.filter(pk=new.pk).update(replacing=None, state=Node.State.READY, step=NodeStep.READY, detail="")
        _move_wireguard_key(cluster, new)
        retry = (f" Retry the {cluster.get_software_display()} install to finish the cluster."
                 if cluster.status == Status.DEGRADED else "")
        record_event(
            cluster, "node_replaced",
            f"{new.name} now runs on its new machine; the old machine stopped and was released (billed until now).{retry}",
        )
        after_commit_changed(cluster.pk)
        return True


def fail_replacement(cluster: Cluster, new: Node, detail: str) -> bool:
    """The new machine did not take over: it is released (billed only if it was up and
    joined, until now), the old one keeps the node, and the cluster stays as it was."""
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        now = timezone.now()
        new = Node.objects.select_related("host").get(pk=new.pk)
        if new.released_at is not None or new.replacing_id is None:
            return False
        billed = new.billing_started_at is not None and new.billing_ended_at is None
        # `replacing` is one-to-one: cleared, so the node can be replaced again.
        Node.objects.filter(pk=new.pk).update(
            state=Node.State.FAILED, detail=detail[:255], released_at=now, step=NodeStep.RELEASED, replacing=None, **NO_HEALTH,
            **({"billing_ended_at": now} if billed else {}),
        )
        if billed:
            billing.end_node_usage([new.pk], now)
        inventory.quarantine_hosts({new.host_id: f"replacement for {new.name} of cluster #{cluster.pk} failed: {detail}"})
        inventory.release_hosts([new.host_id])
        _forget_wireguard_key(cluster, new)
        charge = "billed until now" if billed else "not charged"
        record_event(
            cluster, "replacement_failed",
            f"The new machine for {new.name} did not take over ({detail}); it was released "
            f"({charge}). The old machine keeps running as {new.name}.",
            reason=Reason.BOOT_FAILED,
        )
        after_commit_changed(cluster.pk)
        return True
