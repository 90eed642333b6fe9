"""Every state change of a cluster. Each function is one transaction; side effects (tasks,
live pushes, emails) are queued with transaction.on_commit, never before the data commits."""

from __future__ import annotations

import datetime as dt
import re
import secrets
import shutil
from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.models import Environment, SSHKey, Workspace
from billing import services as billing
from clusters import emails as cluster_emails
from clusters import rules
from clusters.bulk import update_rows
from clusters.errors import ClusterError, Conflict
from clusters.models import (
    FINAL_STATUSES,
    TERMINABLE_STATUSES,
    Cluster,
    ClusterEvent,
    NetworkTest,
    NetworkTestPair,
    Node,
    NodeHealth,
    NodeStep,
    Reason,
    Software,
    Status,
    Volume,
)
from offers import services as inventory
from offers.models import COMMUNITY_WARNING, MachineType

SYSTEM = "system"
# A machine that stops (released, replaced, failed) carries no health: the last round's
# verdict was about a running machine, and a stopped one is not checked again.
NO_HEALTH: dict[str, str] = {"health": NodeHealth.UNKNOWN, "health_detail": ""}


def record_event(cluster: Cluster, event: str, message: str, *, actor: str = SYSTEM, reason: str = "",
                 data: dict[str, Any] | None = None) -> ClusterEvent:
    """The one place a cluster's events are recorded; the lifecycle's events are also sent to
    the workspace's webhook endpoints that want them (webhooks.events), after commit.
    `data`: what the webhook carries besides the cluster (the node, the network test)."""
    from webhooks import events as webhook_events

    recorded = ClusterEvent.objects.create(cluster=cluster, event=event, message=message, actor=actor, reason=reason)
    webhook_events.cluster_event(cluster, recorded, data)
    return recorded


def _after_commit_changed(cluster_id: int, *, advance: bool = False, nodes: Iterable[int] | None = None) -> None:
    """Push the new state to open pages and, when asked, let the reconciler take the next step.
    `nodes`: the ids of the only nodes that changed (None: the cluster or all its nodes did)."""
    from clusters import tasks
    from clusters.broadcast import broadcast_cluster

    changed = None if nodes is None else list(nodes)
    transaction.on_commit(lambda: broadcast_cluster(cluster_id, changed))
    if advance:
        # queue_advance logs a broker that is down instead of raising: the change has
        # committed, and the sweep re-drives the cluster once the broker is back.
        transaction.on_commit(lambda: tasks.queue_advance(cluster_id))


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


# --- create -----------------------------------------------------------------------------


def check_balance(workspace: Workspace, price_per_hour: Decimal) -> None:
    problem = rules.balance_problem(workspace.credit_balance, price_per_hour)
    if problem is not None:
        raise problem


@dataclass
class ClusterPlan:
    """What creating a cluster would do, checked exactly as create_cluster checks it, with
    nothing reserved: the price, the balance rule, the budget, the runway of the whole workspace
    once it runs too, and every refusal (each a ClusterError with its code)."""

    machine_type: MachineType | None
    machines: int | None
    software: str
    price_per_machine_hour: Decimal
    price_per_hour: Decimal
    required_balance: Decimal
    balance: Decimal
    available_machines: int
    monthly_budget: Decimal
    budget_spent: Decimal
    committed_per_hour: Decimal
    problems: list[ClusterError] = field(default_factory=list)
    # What the environment's own clusters cost per hour (booting ones too): the budget's spend.
    environment_per_hour: Decimal = Decimal(0)

    @property
    def can_create(self) -> bool:
        return not self.problems

    @property
    def budget_remaining(self) -> Decimal:
        return billing.budget_remaining(self.monthly_budget, self.budget_spent)

    @property
    def per_hour_after(self) -> Decimal:
        """What everything the workspace runs would cost per hour with this cluster too."""
        return self.committed_per_hour + self.price_per_hour

    @property
    def runway_hours(self) -> Decimal | None:
        """Hours the balance lasts once this cluster runs beside everything else (None: free)."""
        if self.per_hour_after <= 0:
            return None
        return max(self.balance / self.per_hour_after, Decimal(0)).quantize(Decimal("0.01"))

    @property
    def budget_runway_hours(self) -> Decimal | None:
        """Hours the environment's budget left lasts once this cluster runs beside its other
        clusters (None: nothing would be billed)."""
        per_hour = self.environment_per_hour + self.price_per_hour
        if per_hour <= 0:
            return None
        return (self.budget_remaining / per_hour).quantize(Decimal("0.01"))

    @property
    def warnings(self) -> list[str]:
        """Everything to know before creating: the money warnings, then the offer's."""
        return self.money_warnings + self.offer_warnings

    @property
    def offer_warnings(self) -> list[str]:
        if self.machine_type is not None and self.machine_type.community:
            return [COMMUNITY_WARNING]
        return []

    @property
    def money_warnings(self) -> list[str]:
        """The balance's runway and the budget against one hour of this cluster."""
        found = []
        if self.runway_hours is not None and self.runway_hours < 1:
            found.append(
                f"With this cluster the workspace would spend ${self.per_hour_after:,.2f}/h and the balance of "
                f"${self.balance:,.2f} lasts {self.runway_hours * 60:.0f} minutes: every cluster is stopped when "
                "it runs out. Top up first."
            )
        if self.price_per_hour and self.budget_runway_hours is not None and self.budget_runway_hours < 1:
            found.append(
                f"With this cluster the environment would spend ${self.environment_per_hour + self.price_per_hour:,.2f}/h "
                f"and the ${self.budget_remaining:,.2f} left of its monthly budget lasts "
                f"{self.budget_runway_hours * 60:.0f} minutes: its clusters are stopped when the budget is reached. "
                "Raise the budget first."
            )
        return found


def plan_cluster(
    *, environment: Environment, name: str, machine_type: MachineType | None, machine_count: int | None,
    software: str = Software.NONE, volume: Volume | None = None,
) -> ClusterPlan:
    """create_cluster's checks without the locks or the reservation, every refusal collected."""
    from billing.services import month_to_date_spend, required_balance
    from clusters.queries import committed_rate

    workspace = Workspace.objects.get(pk=environment.workspace_id)
    problems = list(rules.request_problems(
        environment=environment, name=name, machine_type=machine_type, machine_count=machine_count,
        software=software, volume=volume,
    ))
    count = machine_count or 0
    per_machine = machine_type.price_per_machine_hour if machine_type is not None else Decimal(0)
    price = machine_type.price_for(count) if machine_type is not None else Decimal(0)
    available = inventory.free_host_count(machine_type) if machine_type is not None else 0
    if machine_type is not None and count and available < count:
        problems.append(Conflict(
            "offer_unavailable",
            f"This offer cannot start {count} machines now ({available} free). Pick another offer or fewer machines.",
            field="offer",
        ))
    if (problem := rules.balance_problem(workspace.credit_balance, price)) is not None:
        problems.append(problem)
    try:
        billing.check_budget(environment)
    except ClusterError as problem:
        problems.append(problem)
    return ClusterPlan(
        machine_type=machine_type, machines=machine_count, software=software, price_per_machine_hour=per_machine,
        price_per_hour=price, required_balance=required_balance(price), balance=workspace.credit_balance,
        available_machines=available, monthly_budget=environment.monthly_budget,
        budget_spent=month_to_date_spend([environment.pk])[environment.pk],
        committed_per_hour=committed_rate(workspace.pk), problems=problems,
        environment_per_hour=committed_rate(workspace.pk, environment_id=environment.pk),
    )


def create_cluster(
    *, environment: Environment, name: str, machine_type: MachineType | None, machine_count: int | None,
    software: str = Software.NONE, volume: Volume | None = None, ssh_keys: Iterable[SSHKey] = (),
    created_by: User | None = None, actor: str = SYSTEM,
) -> Cluster:
    # The checks that need no lock; the money and inventory ones are repeated under locks.
    rules.check_request(
        environment=environment, name=name, machine_type=machine_type, machine_count=machine_count,
        software=software, volume=volume,
    )
    assert machine_type is not None and machine_count is not None
    try:
        with transaction.atomic():
            # Lock the workspace so two creates cannot both spend the same balance check.
            workspace = Workspace.objects.select_for_update().get(pk=environment.workspace_id)
            check_balance(workspace, machine_type.price_for(machine_count))
            billing.check_budget(environment)
            hosts = inventory.reserve_hosts(machine_type, machine_count)
            if hosts is None:
                raise Conflict(
                    "offer_unavailable",
                    f"This offer can no longer start {machine_count} machines now "
                    f"({inventory.free_host_count(machine_type)} free). Pick another offer or fewer machines.",
                    field="offer",
                )
            now = timezone.now()
            cluster = Cluster.objects.create(
                workspace=workspace, environment=environment, name=name, machine_type=machine_type,
                machine_count=machine_count, software=software, volume=volume,
                price_per_machine_hour=machine_type.price_per_machine_hour, provider=machine_type.provider,
                status=Status.PROVISIONING, status_changed_at=now, created_by=created_by,
                deadline_at=now + dt.timedelta(minutes=machine_type.boot_deadline_minutes),
            )
            cluster.ssh_keys.set(list(ssh_keys))
            Node.objects.bulk_create([Node(cluster=cluster, index=i, host=host) for i, host in enumerate(hosts)])
            record_event(
                cluster, "created",
                f"Reserved {machine_count} machines ({machine_type}) at ${cluster.price_per_hour:,.2f}/h; software: "
                f"{cluster.get_software_display()}.",
                actor=actor,
            )
            _after_commit_changed(cluster.pk, advance=True)
    except IntegrityError as exc:
        # The host constraint caught a double booking the lock would have prevented; treat
        # it as the offer having gone, never as two clusters on one machine.
        if "host_held_by_one_live_node" in str(exc):
            raise Conflict("offer_unavailable", "Those machines were just taken. Try again.", field="offer") from None
        if "cluster_name_unique_among_live" in str(exc):
            # Another create with this name committed first.
            raise rules.name_taken(name) from None
        raise
    return cluster


def recreate_cluster(failed: Cluster, machine_type: MachineType | None, *, created_by: User | None = None, actor: str = SYSTEM) -> Cluster:
    """The customer's choice on a failed cluster's page: the same cluster (name, size,
    software, SSH keys, volume) on an offer that can start it now. Nothing is retried
    without this choice."""
    if failed.status != Status.FAILED:
        raise Conflict("not_failed", f"{failed.name} did not fail; only a failed cluster is created again.")
    same_machine = machine_type is not None and (
        machine_type.gpu_id == failed.machine_type.gpu_id
        and machine_type.gpus_per_machine == failed.machine_type.gpus_per_machine
    )
    if not same_machine:
        raise ClusterError(
            "offer_not_found", "Pick one of the offers listed for the same GPU and size.", field="offer"
        )
    return create_cluster(
        environment=failed.environment, name=failed.name, machine_type=machine_type,
        machine_count=failed.machine_count, software=failed.software, volume=failed.volume,
        ssh_keys=list(failed.ssh_keys.all()), created_by=created_by, actor=actor,
    )


# --- lease: one worker moves a cluster at a time ----------------------------------------


@dataclass
class Lease:
    """A pass's hold on one cluster. `expires_at` is also the holder's token: every renewal
    and the release compare-and-set on it, so a holder that lost the lease touches nothing."""

    cluster_id: int
    expires_at: dt.datetime


def lease_length() -> dt.timedelta:
    return dt.timedelta(seconds=settings.CLUSTER_LEASE_SECONDS)


def claim_lease(cluster_id: int) -> Lease | None:
    """Compare-and-set the lease when it is free or has lapsed.

    A lease is short and renewed by the holder's heartbeat, and released when its pass ends,
    so one found lapsed (set, but in the past) belonged to a worker that died mid-pass: the
    customer is told the step is being repeated."""
    now = timezone.now()
    current = (
        Cluster.objects.filter(pk=cluster_id).exclude(status__in=FINAL_STATUSES)
        .values_list("lease_expires_at", flat=True).first()
    )
    row = Cluster.objects.filter(pk=cluster_id).exclude(status__in=FINAL_STATUSES)
    if current is None:
        row = row.filter(lease_expires_at__isnull=True)
    elif current >= now:
        return None
    else:
        row = row.filter(lease_expires_at=current)
    expires = now + lease_length()
    # The queued mark goes with the claim: the task that was queued is running now.
    if not row.update(lease_expires_at=expires, wake_requested=False, advance_queued_at=None):
        return None
    if current is not None:
        ClusterEvent.objects.create(
            cluster_id=cluster_id, event="pass_interrupted", actor=SYSTEM, reason=Reason.PROVIDER_ERROR,
            message="The control plane worker moving this cluster stopped mid-step; another worker took over "
            "and is repeating that step.",
        )
        _after_commit_changed(cluster_id)
    return Lease(cluster_id, expires)


def renew_lease(lease: Lease) -> bool:
    """Push the expiry on while the pass runs; False when the lease was lost meanwhile."""
    expires = timezone.now() + lease_length()
    if not Cluster.objects.filter(pk=lease.cluster_id, lease_expires_at=lease.expires_at).update(lease_expires_at=expires):
        return False
    lease.expires_at = expires
    return True


def release_lease(lease: Lease) -> bool:
    """End the hold, unless a wake-up was asked for while the pass ran: then keep the lease,
    clear the mark and return False, so the holder takes another pass before it lets go.
    Only the holder's own lease: one that lapsed and was claimed by another worker is theirs."""
    held = Cluster.objects.filter(pk=lease.cluster_id, lease_expires_at=lease.expires_at)
    if held.filter(wake_requested=False).update(lease_expires_at=None):
        return True
    return not held.filter(wake_requested=True).update(wake_requested=False)


def request_wake(cluster_id: int) -> None:
    """A pass was asked for while another holds the lease: leave a mark its holder honours
    before releasing (release_lease), instead of waiting for the next sweep."""
    Cluster.objects.filter(pk=cluster_id, lease_expires_at__isnull=False).update(
        wake_requested=True, advance_queued_at=None
    )


def mark_queued(cluster_ids: Iterable[int], at: dt.datetime | None) -> None:
    """Note that a pass is queued (to run from `at`; None: it could not be), so the sweep
    does not queue another."""
    Cluster.objects.filter(pk__in=list(cluster_ids)).update(advance_queued_at=at)


def claim_for_sweep(cluster_ids: Iterable[int]) -> list[int]:
    """Those of `cluster_ids` not queued already (or queued so long ago that the task was
    lost), marked queued now. Rows another sweep is marking are skipped, not waited for."""
    now = timezone.now()
    not_queued = Q(advance_queued_at__isnull=True) | Q(
        advance_queued_at__lt=now - dt.timedelta(seconds=settings.CLUSTER_QUEUED_GRACE_SECONDS)
    )
    with transaction.atomic():
        ids = list(
            Cluster.objects.select_for_update(skip_locked=True).filter(not_queued, pk__in=list(cluster_ids))
            .order_by("pk").values_list("pk", flat=True)
        )
        Cluster.objects.filter(pk__in=ids).update(advance_queued_at=now)
    return ids


# --- node progress (called by the lifecycle) --------------------------------------------


def update_nodes(cluster_id: int, changes: Iterable[tuple[Node, dict]]) -> None:
    """Record the progress of several nodes of one cluster with a single live push, which
    carries those nodes' rows (one push per node would make a 64-node pass push 64 times).
    Nodes changing the same fields go in one UPDATE (clusters.bulk)."""
    changes = list(changes)
    if not changes:
        return
    by_fields: dict[tuple[str, ...], list[Node]] = {}
    for node, fields in changes:
        for key, value in fields.items():
            setattr(node, key, value)
        by_fields.setdefault(tuple(sorted(fields)), []).append(node)
    with transaction.atomic():
        # Node rows in id order (the lock order in docs/architecture.md).
        for names, nodes in by_fields.items():
            update_rows(Node, sorted(nodes, key=lambda n: n.pk), list(names))
        _after_commit_changed(cluster_id, nodes=[node.pk for node, _ in changes])


SETTLED_NODE_STATES = (
    Node.State.READY, Node.State.INSTALL_FAILED, Node.State.FAILED, Node.State.STOPPED, Node.State.RELEASED,
)


def append_node_logs(cluster_id: int, lines_by_node: dict[int, list[tuple[str, str]]], *, keep: int = Node.LOG_KEEP) -> None:
    """Add (step, line) output to each node's log tail and note the step it is on; one push."""
    if not lines_by_node:
        return
    stamp = timezone.now().strftime("%H:%M:%S")
    with transaction.atomic():
        # Only the node rows, in id order: Node's default ordering joins the cluster, and a
        # FOR UPDATE over that join would lock the cluster row too, against the lock order
        # (cluster before nodes) that terminate and mark_degraded take.
        nodes = list(
            Node.objects.select_for_update(of=("self",)).filter(pk__in=list(lines_by_node))
            .only("log_tail", "log_written", "state", "step", "installed_at").order_by("pk")
        )
        for node in nodes:
            entries = lines_by_node[node.pk]
            text = "".join(f"[{stamp}] {step}: {line}\n" for step, line in entries if line.strip())
            node.log_tail = (node.log_tail + text)[-keep:]
            node.log_written += len(text)
            # Output arrives after the fact; it must not relabel a node that has settled, nor
            # one whose install finished (it is only checked from then on). Only the label: the
            # lifecycle decides on installed_at, so a late line cannot make it install again.
            if node.state not in SETTLED_NODE_STATES and node.installed_at is None:
                node.step = entries[-1][0][:40]
        update_rows(Node, nodes, ["log_tail", "log_written", "step"], locked=True)
        _after_commit_changed(cluster_id, nodes=[node.pk for node in nodes])


def save_node_secrets(cluster: Cluster, secrets: dict) -> None:
    from clusters.sealing import seal

    sealed = seal(secrets)
    Cluster.objects.filter(pk=cluster.pk).update(node_secrets=sealed)
    cluster.node_secrets = sealed


def record_host_keys(cluster: Cluster, nodes: list[Node], keys: dict[str, str]) -> None:
    """The SSH host key each machine presented (set_names): what the customer's known_hosts
    holds for its node. `nodes` are the machines the keys were read from, under the node names
    they ran as (a machine being swapped in runs as the node it replaces)."""
    for node in nodes:
        key = keys.get(node.name, "")
        if key and key != node.host_key:
            Node.objects.filter(pk=node.pk).update(host_key=key)
            node.host_key = key


def mark_joined(cluster: Cluster, nodes: list[Node]) -> bool:
    """Every machine is up and reaches every other: billing starts now, at one instant for all."""
    with transaction.atomic():
        now = timezone.now()
        next_status = Status.READY if cluster.software == Software.NONE else Status.INSTALLING
        extra = {"ready_at": now} if next_status == Status.READY else {}
        if not transition(cluster, [Status.PROVISIONING], next_status, billing_started_at=now, **extra):
            return False
        node_state = Node.State.READY if next_status == Status.READY else Node.State.JOINED
        Node.objects.filter(cluster=cluster, released_at__isnull=True).update(
            state=node_state, joined_at=now, billing_started_at=now, detail="",
            **({"ready_at": now, "step": NodeStep.READY} if node_state == Node.State.READY else {"step": NodeStep.JOINED}),
        )
        billing.start_usage(cluster, nodes, now)
        record_event(cluster, "joined", f"All {len(nodes)} machines joined the private network 10.77.0.0/24; billing started.")
        if next_status == Status.READY:
            _announce_ready(cluster)
        _after_commit_changed(cluster.pk, advance=next_status == Status.INSTALLING)
        return True


def _announce_ready(cluster: Cluster) -> None:
    record_event(cluster, "ready", f"{cluster.name} is ready: {cluster.machine_count} machines, {cluster.get_software_display()}.")
    cluster_emails.notify_ready(cluster)
    _network_test_after_ready(cluster)


def mark_ready(cluster: Cluster) -> bool:
    with transaction.atomic():
        if not transition(cluster, [Status.INSTALLING], Status.READY, ready_at=timezone.now()):
            return False
        Node.objects.filter(cluster=cluster, released_at__isnull=True).update(
            state=Node.State.READY, ready_at=timezone.now(), step=NodeStep.READY
        )
        _announce_ready(cluster)
        _after_commit_changed(cluster.pk)
        return True


def mark_degraded(cluster: Cluster, failed: dict[str, str], *, from_status: str = Status.INSTALLING) -> bool:
    """The software failed after every machine was up: machines stay up and billed. From
    `installing`, or from `ready` when a worker added to a running cluster fails its install."""
    with transaction.atomic():
        if not transition(cluster, [from_status], Status.DEGRADED):
            return False
        broken = [
            node for node in cluster.nodes.filter(released_at__isnull=True).only("cluster_id", "index").order_by("pk")
            if node.name in failed
        ]
        for node in broken:
            node.state, node.detail = Node.State.INSTALL_FAILED, failed[node.name][:255]
        update_rows(Node, broken, ["state", "detail"])
        # The others finished their part: they say so, not "Installing" for as long as it lasts.
        Node.objects.filter(
            cluster=cluster, released_at__isnull=True, state__in=[Node.State.INSTALLING, Node.State.JOINED]
        ).exclude(pk__in=[n.pk for n in broken]).update(state=Node.State.INSTALLED, step=NodeStep.INSTALLED, detail="")
        summary = "; ".join(f"{name}: {msg}" for name, msg in sorted(failed.items()))
        record_event(
            cluster, "degraded",
            f"{cluster.get_software_display()} failed to install ({summary}). Machines stay up and billed: "
            "retry the install or terminate the cluster.",
            reason=Reason.INSTALL_FAILED,
        )
        cluster_emails.notify_degraded(cluster)
        _after_commit_changed(cluster.pk)
        return True


def fail_cluster(cluster: Cluster, reason: str, message: str, node_details: dict[str, str] | None = None) -> bool:
    """All or nothing: a cluster that never had every machine up is failed, released, and never billed."""
    with transaction.atomic():
        if not transition(cluster, [Status.PROVISIONING], Status.FAILED, failure_reason=reason, terminated_at=timezone.now()):
            return False
        now = timezone.now()
        node_details = node_details or {}
        nodes = list(cluster.nodes.only("cluster_id", "index", "detail", "host_id").order_by("pk"))
        for node in nodes:
            node.state = Node.State.FAILED if node.name in node_details else Node.State.RELEASED
            node.detail = node_details.get(node.name, node.detail)[:255]
            node.released_at, node.step = now, NodeStep.RELEASED
            node.health, node.health_detail = NodeHealth.UNKNOWN, ""  # a stopped machine has no health
        update_rows(Node, nodes, ["state", "detail", "released_at", "step", "health", "health_detail"])
        inventory.release_hosts([node.host_id for node in nodes])
        record_event(
            cluster, "failed", f"{message.rstrip('. ')}. Every machine was released; nothing was charged.", reason=reason
        )
        cluster_emails.notify_failed(cluster)
        _after_commit_changed(cluster.pk)
        return True


# --- customer actions -------------------------------------------------------------------


def terminate_cluster(cluster: Cluster, *, actor: str = SYSTEM, reason: str = Reason.USER_REQUESTED) -> bool:
    """Stop every machine together; billing for the whole cluster ends now."""
    with transaction.atomic():
        now = timezone.now()
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
        live_nodes.filter(billing_started_at__isnull=False).update(billing_ended_at=now)
        billing.end_usage(cluster, now)
        label = Reason(reason).label
        record_event(cluster, "terminating", f"Termination requested: {label}. Billing stopped.", actor=actor, reason=reason)
        _after_commit_changed(cluster.pk, advance=True)
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
        _after_commit_changed(cluster.pk)
        return True


def retry_install(cluster: Cluster, *, actor: str = SYSTEM) -> None:
    with transaction.atomic():
        # Counted on the row: `cluster` may be a stale read, and the attempt number keys the
        # next degraded email, which a repeated number would swallow.
        if not transition(cluster, [Status.DEGRADED], Status.INSTALLING, install_attempts=F("install_attempts") + 1):
            raise Conflict("not_degraded", f"Only a degraded cluster can retry its install; this one is {cluster.status}.")
        cluster.refresh_from_db(fields=["install_attempts"])
        Node.objects.filter(cluster=cluster, released_at__isnull=True).update(
            state=Node.State.JOINED, detail="", installed_at=None, step=NodeStep.INSTALL_QUEUED
        )
        record_event(cluster, "install_retried", f"Retrying the {cluster.get_software_display()} install.", actor=actor)
        _after_commit_changed(cluster.pk, advance=True)


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
        record_event(cluster, "workers_added", f"Adding {names}; each is billed from the moment it is up.", actor=actor)
        _after_commit_changed(cluster.pk, advance=True)
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
        _after_commit_changed(cluster.pk, advance=True)
        return True


def mark_workers_ready(cluster: Cluster, workers: list[Node]) -> None:
    with transaction.atomic():
        Node.objects.filter(pk__in=[w.pk for w in workers]).update(
            state=Node.State.READY, ready_at=timezone.now(), step=NodeStep.READY
        )
        record_event(cluster, "workers_ready", f"{', '.join(w.name for w in workers)} ready.")
        _after_commit_changed(cluster.pk)


def release_worker(cluster: Cluster, worker: Node, detail: str) -> None:
    """A worker that never came up is given back alone; the running cluster is untouched and
    the worker was never billed."""
    with transaction.atomic():
        updated = Node.objects.filter(pk=worker.pk, released_at__isnull=True, billing_started_at__isnull=True).update(
            state=Node.State.FAILED, detail=detail[:255], released_at=timezone.now(), step=NodeStep.RELEASED, **NO_HEALTH
        )
        if not updated:
            return
        inventory.release_hosts([worker.host_id])
        Cluster.objects.filter(pk=cluster.pk).update(machine_count=F("machine_count") - 1)
        record_event(
            cluster, "worker_failed", f"{worker.name} did not come up ({detail}); it was released and not charged.",
            reason=Reason.BOOT_FAILED,
        )
        _after_commit_changed(cluster.pk)


# --- replacing a node -------------------------------------------------------------------
#
# A machine of the same type is swapped in for one node: it boots, takes that node's name and
# private address, joins the mesh and the software, and only then is the old machine stopped.
# The new machine is a Node row of its own with the same index and `replacing` set to the old
# one until the swap is done (the unique index on (cluster, index) leaves such rows out).


def _swap_in_progress(cluster: Cluster) -> Node | None:
    return (
        Node.objects.filter(cluster=cluster, released_at__isnull=True, replacing__isnull=False)
        .select_related("replacing").first()
    )


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
        if cluster.status != Status.READY:
            raise Conflict(
                "not_ready", f"A node can be replaced in a ready cluster; {cluster.name} is {cluster.status}."
            )
        live = list(Node.objects.filter(cluster=cluster, released_at__isnull=True).select_related("host").order_by("pk"))
        old = next((n for n in live if n.name == name and n.replacing_id is None), None)
        if old is None:
            raise ClusterError("node_not_found", f"{cluster.name} has no node {name}.", field="node", status=404)
        if (problem := replacement_in_progress(cluster)) is not None:
            raise problem
        if any(n.state != Node.State.READY for n in live):
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
            actor=actor,
        )
        _after_commit_changed(cluster.pk, advance=True)
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
    _after_commit_changed(cluster.pk)


def mark_replacement_joined(cluster: Cluster, new: Node) -> bool:
    """The new machine is up and every node reaches it under the old one's name: bill it from now."""
    with transaction.atomic():
        # As mark_workers_joined: never open an interval after a terminate ended the usage.
        if not Cluster.objects.select_for_update().filter(pk=cluster.pk, status=Status.READY).exists():
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
        _after_commit_changed(cluster.pk, advance=True)
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
        _after_commit_changed(cluster.pk, nodes=[new.pk])


def _move_wireguard_key(cluster: Cluster, new: Node) -> None:
    """The key the new machine joined with becomes its name's key (clusters.providers.fabric)."""
    from clusters.nodeops.operations import replacement_key_name

    secrets = dict(cluster.plain_node_secrets)
    keys = dict(secrets.get("wireguard") or {})
    if replacement_key_name(new.pk) in keys:
        keys[new.name] = keys.pop(replacement_key_name(new.pk))
        secrets["wireguard"] = keys
        save_node_secrets(cluster, secrets)


def _forget_wireguard_key(cluster: Cluster, new: Node) -> None:
    from clusters.nodeops.operations import replacement_key_name

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
        if cluster.status != Status.READY:
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
            state=Node.State.STOPPED, released_at=now, billing_ended_at=now, replaced_at=now, step=NodeStep.REPLACED,
            detail="replaced by a new machine", **NO_HEALTH,
        ):
            billing.end_node_usage([old.pk], now)
            inventory.release_hosts([old.host_id])
        Node.objects.filter(pk=new.pk).update(replacing=None, state=Node.State.READY, step=NodeStep.READY, detail="")
        _move_wireguard_key(cluster, new)
        record_event(
            cluster, "node_replaced",
            f"{new.name} now runs on its new machine; the old machine stopped and was released (billed until now).",
        )
        _after_commit_changed(cluster.pk)
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
        inventory.release_hosts([new.host_id])
        _forget_wireguard_key(cluster, new)
        charge = "billed until now" if billed else "not charged"
        record_event(
            cluster, "replacement_failed",
            f"The new machine for {new.name} did not take over ({detail}); it was released "
            f"({charge}). The old machine keeps running as {new.name}.",
            reason=Reason.BOOT_FAILED,
        )
        _after_commit_changed(cluster.pk)
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


# --- network tests ----------------------------------------------------------------------
# Measured outside the cluster's lease (clusters.network_tests): a test never delays ready,
# a grow or a terminate, and a terminate stops it between two rounds.

ACTIVE_NETWORK_TEST = (NetworkTest.Status.QUEUED, NetworkTest.Status.RUNNING)


def _network_test_after_ready(cluster: Cluster) -> None:
    # Simulated machines have no network to measure; a test of them could only fail.
    if settings.NETWORK_TEST_AFTER_READY and cluster.provider != "simulated":
        _queue_network_test(cluster, NetworkTest.Trigger.AFTER_READY, SYSTEM)


def _measured_node_names(cluster_id: int) -> list[str]:
    # A machine being swapped in shares its name with the one it replaces until it took over.
    live = Node.objects.filter(cluster_id=cluster_id, released_at__isnull=True, replacing__isnull=True)
    return [n.name for n in live.order_by("index")]


def _queue_network_test(cluster: Cluster, trigger: str, actor: str) -> NetworkTest:
    names = _measured_node_names(cluster.pk)
    test = NetworkTest.objects.create(
        cluster=cluster, trigger=trigger, requested_by=actor, expected_gbps=rules.network_test_floor_gbps(),
        node_names=names, queued_at=timezone.now(),
    )
    _after_commit_network_changed(cluster.pk, queue=test.pk)
    return test


def _after_commit_network_changed(cluster_id: int, *, queue: int | None = None) -> None:
    from clusters import tasks
    from clusters.broadcast import broadcast_network

    transaction.on_commit(lambda: broadcast_network(cluster_id))
    if queue is not None:
        transaction.on_commit(lambda: tasks.queue_network_test(queue))


def start_network_test(cluster: Cluster, *, actor: str = SYSTEM) -> NetworkTest:
    """Measure the cluster's private network again, on request (only one test at a time)."""
    with transaction.atomic():
        # The cluster row serialises two requests: both would otherwise see no test running.
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        if cluster.status != Status.READY:
            raise Conflict(
                "not_ready", f"The network of a ready cluster can be tested; {cluster.name} is {cluster.status}."
            )
        # Mid-swap the mesh holds two machines under one name: measure once the new one took over.
        if (swapping := replacement_in_progress(cluster)) is not None:
            raise swapping
        fail_stale_network_tests(cluster_id=cluster.pk)
        active = cluster.network_tests.filter(status__in=ACTIVE_NETWORK_TEST).first()
        if active is not None:
            raise Conflict(
                "network_test_running",
                f"Network test {active.pk} of {cluster.name} is still {active.status}; wait for its results.",
                details={"network_test_id": active.pk},
            )
        test = _queue_network_test(cluster, NetworkTest.Trigger.ON_DEMAND, actor)
        record_event(cluster, "network_test_requested", f"Network test {test.pk} requested.", actor=actor)
        return test


def claim_network_test(test_id: int) -> NetworkTest | None:
    """Compare-and-set queued -> running: one worker runs a test, a second delivery does nothing."""
    now = timezone.now()
    if not NetworkTest.objects.filter(pk=test_id, status=NetworkTest.Status.QUEUED).update(
        status=NetworkTest.Status.RUNNING, started_at=now, alive_at=now
    ):
        return None
    test = NetworkTest.objects.select_related("cluster", "cluster__machine_type").get(pk=test_id)
    names = _measured_node_names(test.cluster_id)
    NetworkTest.objects.filter(pk=test_id).update(node_names=names)
    test.node_names = names
    _after_commit_network_changed(test.cluster_id)
    return test


def set_network_test_method(test: NetworkTest, method: str) -> None:
    NetworkTest.objects.filter(pk=test.pk).update(method=method)
    test.method = method
    _after_commit_network_changed(test.cluster_id)


def record_network_pairs(test: NetworkTest, measurements: Iterable[Any]) -> list[NetworkTestPair]:
    """One round's pairs (clusters.nodeops PairMeasurement), each marked slow against the
    test's floor. Only while the test runs: the sweep may have failed it meanwhile."""
    index = {name: int(name.removeprefix("node-")) for name in test.node_names}
    rows = [
        NetworkTestPair(
            test=test, phase=m.phase, source_index=index[m.source], target_index=index[m.target], gbps=m.gbps,
            latency_ms=m.latency_ms, slow=m.gbps is not None and m.gbps < test.expected_gbps, error=m.error[:255],
        )
        for m in measurements
    ]
    with transaction.atomic():
        if not NetworkTest.objects.select_for_update().filter(pk=test.pk, status=NetworkTest.Status.RUNNING).exists():
            return []
        created = NetworkTestPair.objects.bulk_create(rows, ignore_conflicts=True)
        _after_commit_network_changed(test.cluster_id)
    return created


def finish_network_test(test: NetworkTest, *, error: str = "", notes: Iterable[str] = (),
                        nccl_rows: list[dict[str, Any]] | None = None) -> bool:
    """The outcome: failed when it could not run (or a pair could not be measured), slow when
    a pair (or NCCL's bus bandwidth) is under the floor, passed otherwise."""
    with transaction.atomic():
        pairs = list(test.pairs.all())
        nccl_rows = nccl_rows or []
        broken = [p for p in pairs if p.error]
        slow = [p for p in pairs if p.slow]
        peak_busbw_gbps = max((row["busbw_gbs"] * 8 for row in nccl_rows), default=None)
        nccl_slow = peak_busbw_gbps is not None and peak_busbw_gbps < test.expected_gbps
        lines = [*notes]
        if error:
            lines.append(error)
        if broken:
            lines.append(f"{len(broken)} pair(s) could not be measured: " + "; ".join(
                f"node-{p.source_index} → node-{p.target_index}: {p.error}" for p in broken[:4]))
        if slow:
            lines.append(f"{len(slow)} slow pair(s), under {test.expected_gbps:.3g} Gbit/s: " + ", ".join(
                f"node-{p.source_index} → node-{p.target_index} {p.gbps:.2f}"
                + (" (ring)" if p.phase == NetworkTestPair.Phase.RING else "") for p in slow[:8]) + ".")
        if nccl_slow:
            lines.append(f"all_reduce_perf's best bus bandwidth is {peak_busbw_gbps:.2f} Gbit/s, "
                         f"under {test.expected_gbps:.3g} Gbit/s.")
        if error or broken:
            status = NetworkTest.Status.FAILED
        elif slow or nccl_slow:
            status = NetworkTest.Status.SLOW
        else:
            status = NetworkTest.Status.PASSED
        measured = [p.gbps for p in pairs if p.gbps is not None and p.phase == NetworkTestPair.Phase.PAIRS] or [
            p.gbps for p in pairs if p.gbps is not None]
        if status != NetworkTest.Status.FAILED and measured:
            lines.insert(0, f"{len(pairs)} measurement(s), {min(measured):.2f}–{max(measured):.2f} Gbit/s.")
        elif status != NetworkTest.Status.FAILED and peak_busbw_gbps is not None:
            lines.insert(0, f"all_reduce_perf over {len(test.node_names)} nodes: best bus bandwidth "
                            f"{peak_busbw_gbps:.2f} Gbit/s.")
        detail = " ".join(lines)
        if not NetworkTest.objects.filter(pk=test.pk, status=NetworkTest.Status.RUNNING).update(
            status=status, finished_at=timezone.now(), detail=detail, nccl_rows=nccl_rows
        ):
            return False
        test.status, test.detail = status, detail
        label = {NetworkTest.Status.PASSED: "passed", NetworkTest.Status.SLOW: "found slow pairs",
                 NetworkTest.Status.FAILED: "could not run"}[status]
        record_event(test.cluster, "network_test_finished", f"Network test {test.pk} {label}. {detail}".strip(),
                     data={"network_test": {"id": test.pk, "status": status, "method": test.method}})
        _after_commit_changed(test.cluster_id)
        _after_commit_network_changed(test.cluster_id)
        return True


def mark_network_test_unqueued(test_id: int) -> None:
    """Its task could not be handed to the broker: the next sweep queues it again."""
    NetworkTest.objects.filter(pk=test_id, status=NetworkTest.Status.QUEUED).update(queued_at=None)


def claim_lost_network_tests() -> list[int]:
    """Queued tests whose task never reached the broker, or reached it CLUSTER_QUEUED_GRACE_SECONDS
    ago without starting (lost with a dead worker, or by the broker), marked queued now."""
    now = timezone.now()
    lost = Q(queued_at__isnull=True) | Q(queued_at__lt=now - dt.timedelta(seconds=settings.CLUSTER_QUEUED_GRACE_SECONDS))
    with transaction.atomic():
        ids = list(
            NetworkTest.objects.select_for_update(skip_locked=True).filter(lost, status=NetworkTest.Status.QUEUED)
            .order_by("pk").values_list("pk", flat=True)
        )
        NetworkTest.objects.filter(pk__in=ids).update(queued_at=now)
    return ids


def renew_network_test(test_id: int) -> bool:
    """The runner's heartbeat; False once the test is no longer running (finished, or failed
    by the sweep)."""
    return bool(NetworkTest.objects.filter(pk=test_id, status=NetworkTest.Status.RUNNING).update(alive_at=timezone.now()))


def fail_stale_network_tests(*, cluster_id: int | None = None) -> int:
    """A running test whose heartbeat stopped NETWORK_TEST_STALE_SECONDS ago lost its worker:
    fail it, so a new one can start. (The next test's `serve` reuses an iperf3 server it left
    running.) A test that runs long but whose runner is alive is left alone."""
    cutoff = timezone.now() - dt.timedelta(seconds=settings.NETWORK_TEST_STALE_SECONDS)
    stale = NetworkTest.objects.alias(last_sign=Coalesce("alive_at", "started_at")).filter(
        status=NetworkTest.Status.RUNNING, last_sign__lt=cutoff
    )
    if cluster_id is not None:
        stale = stale.filter(cluster_id=cluster_id)
    failed = 0
    for test in stale.select_related("cluster"):
        if NetworkTest.objects.filter(pk=test.pk, status=NetworkTest.Status.RUNNING).update(
            status=NetworkTest.Status.FAILED, finished_at=timezone.now(),
            detail="The control plane worker running this test stopped before it finished; run it again.",
        ):
            failed += 1
            _after_commit_network_changed(test.cluster_id)
    return failed


def fail_network_test_of_ended_cluster(test: NetworkTest) -> bool:
    """A queued test whose cluster stopped being ready before it ran."""
    cluster = Cluster.objects.get(pk=test.cluster_id)
    updated = NetworkTest.objects.filter(pk=test.pk, status__in=ACTIVE_NETWORK_TEST).update(
        status=NetworkTest.Status.FAILED, finished_at=timezone.now(),
        detail=f"Not run: the cluster is {cluster.status}.",
    )
    if updated:
        _after_commit_network_changed(test.cluster_id)
    return bool(updated)


# --- volumes ----------------------------------------------------------------------------


VOLUME_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,99}$")


def create_volume(*, environment: Environment, name: str, size_gb: int) -> Volume:
    """A volume in an environment. Its data lives under VOLUMES_DIR; attached clusters sync
    it into /shared/volume on the head and back when they terminate."""
    from django.conf import settings

    if not VOLUME_NAME_RE.match(name or ""):
        raise ClusterError("invalid_name", "Use lowercase letters, digits, dots, dashes and underscores.", field="name")
    if not 1 <= size_gb <= 100_000:
        raise ClusterError("invalid_size", "A volume holds 1 GB to 100,000 GB.", field="size_gb")
    if Volume.objects.filter(environment=environment, name=name).exists():
        raise ClusterError("name_taken", f"This environment already has a volume named {name!r}.", field="name")
    # A folder of its own, never a name's: a volume created again under a deleted one's name
    # starts empty.
    path = Path(settings.VOLUMES_DIR) / str(environment.pk) / secrets.token_hex(16)
    volume = Volume.objects.create(
        workspace_id=environment.workspace_id, environment=environment, name=name, size_gb=size_gb, source_path=str(path)
    )
    path.mkdir(parents=True, exist_ok=True)
    return volume


def delete_volume(volume: Volume) -> None:
    with transaction.atomic():
        if Cluster.objects.live().filter(volume=volume).exists():
            raise Conflict("volume_in_use", f"{volume.name} is attached to a live cluster; terminate it first.")
        # Ended clusters keep a reference (on_delete=PROTECT) that would refuse the delete;
        # they hold no machines, so they simply forget the volume.
        Cluster.objects.filter(volume=volume).update(volume=None)
        volume.delete()
        # Its data goes with it, once the delete is committed.
        if volume.source_path:
            transaction.on_commit(lambda: shutil.rmtree(volume.source_path, ignore_errors=True))


# --- node health ------------------------------------------------------------------------

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
            _after_commit_changed(cluster_id, nodes=shown)
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
