"""Emails about a cluster's lifecycle, sent through notifications.notify().

The hooks (`notify_ready`, `notify_failed`, …) are called by clusters.services inside the
transaction that makes the change, so the record of the email commits with the event and
the send is queued after commit. Each event has one dedupe key, so a duplicate trigger (a
second worker, a re-run task) records nothing new. `cluster_context` builds the templates'
context when the email is sent."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from accounts.models import Role
from billing.models import MachineUsage
from billing.services import machines_cost
from clusters.models import Cluster, Node, NodeHealth, Reason
from clusters.services.common import SYSTEM
from notifications.kinds import Kind, email_context
from notifications.services import notify

STOP_REASONS = (Reason.BALANCE_EXHAUSTED, Reason.BUDGET_REACHED)


def recipient_ids(cluster: Cluster) -> list[int]:
    """The person who created the cluster; else the workspace's owners."""
    if cluster.created_by_id and cluster.created_by and cluster.created_by.email:
        return [cluster.created_by_id]
    return list(cluster.workspace.memberships.filter(role=Role.OWNER).values_list("user_id", flat=True))


def _notify(cluster: Cluster, kind: str, event: str) -> None:
    notify(
        kind, user_ids=recipient_ids(cluster), context={"cluster_id": cluster.pk},
        dedupe_key=f"cluster:{cluster.pk}:{event}", workspace_id=cluster.workspace_id,
    )


def notify_ready(cluster: Cluster) -> None:
    _notify(cluster, Kind.CLUSTER_READY, "ready")


def notify_failed(cluster: Cluster) -> None:
    _notify(cluster, Kind.CLUSTER_FAILED, "failed")


def notify_degraded(cluster: Cluster) -> None:
    # One email per degradation, not per retry: a retried install that fails again is the
    # same degradation (the Events list says each attempt). One that ends in ready closes it,
    # so a later one (a worker's install on the ready cluster) is emailed again: the key is
    # when the cluster was last ready.
    ready_at = Cluster.objects.filter(pk=cluster.pk).values_list("ready_at", flat=True).get()
    _notify(cluster, Kind.CLUSTER_DEGRADED, f"degraded:{ready_at.isoformat() if ready_at else 'install'}")


def notify_node_unhealthy(cluster: Cluster, node: Node, health: str, detail: str, at: dt.datetime) -> None:
    """Once per episode: the round that saw the node turn bad. Rounds that find it still bad
    change nothing, so they record no notification; the key names the episode by its start."""
    notify(
        Kind.NODE_UNHEALTHY, user_ids=recipient_ids(cluster),
        context={"cluster_id": cluster.pk, "node_name": node.name, "health": health,
                 "health_label": NodeHealth(health).label.lower(), "health_detail": detail,
                 "is_head": node.index == 0},
        dedupe_key=f"cluster:{cluster.pk}:node:{node.pk}:unhealthy:{at.isoformat()}", workspace_id=cluster.workspace_id,
    )


def notify_node_recovered(cluster: Cluster, node: Node, at: dt.datetime) -> None:
    notify(
        Kind.NODE_RECOVERED, user_ids=recipient_ids(cluster),
        context={"cluster_id": cluster.pk, "node_name": node.name, "health": NodeHealth.HEALTHY,
                 "health_label": NodeHealth.HEALTHY.label.lower(), "health_detail": ""},
        dedupe_key=f"cluster:{cluster.pk}:node:{node.pk}:recovered:{at.isoformat()}", workspace_id=cluster.workspace_id,
    )


def notify_terminated(cluster: Cluster) -> None:
    """One email when a cluster ends; when billing stopped it (balance or budget) it is the
    critical "stopped" email, which users cannot turn off."""
    kind = Kind.CLUSTER_STOPPED if cluster.termination_reason in STOP_REASONS else Kind.CLUSTER_TERMINATED
    _notify(cluster, kind, "terminated")


# --- template context, built when the email is sent -------------------------------------


def total_cost(cluster: Cluster) -> Decimal:
    """What the cluster's machines cost, as the ledger has (or, once metering catches up,
    will have) it: each machine's accrual rounded to cents, as billing posts it."""
    return machines_cost(MachineUsage.objects.filter(cluster=cluster), timezone.now())


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{days} d"] if days else []
    if hours or days:
        parts.append(f"{hours} h")
    parts.append(f"{minutes} min")
    if not days and not hours:
        parts.append(f"{secs} s")
    return " ".join(parts)


def _terminated_by(cluster: Cluster) -> str:
    """Who asked for the termination, as the cluster's events name them: a teammate's
    username, or the API key they used (its prefix)."""
    actor = cluster.events.filter(event="terminating").order_by("-pk").values_list("actor", flat=True).first()
    if actor and actor.startswith("api key "):
        return f"Terminated with the API key {actor.removeprefix('api key ')}"
    if actor and actor != SYSTEM:
        return f"Terminated by {actor}"
    return Reason.USER_REQUESTED.label


@email_context(Kind.CLUSTER_READY, Kind.CLUSTER_FAILED, Kind.CLUSTER_DEGRADED, Kind.CLUSTER_TERMINATED,
               Kind.CLUSTER_STOPPED, Kind.NODE_UNHEALTHY, Kind.NODE_RECOVERED)
def cluster_context(stored: dict) -> dict:
    cluster = Cluster.objects.select_related(
        "machine_type__gpu", "machine_type__location", "workspace", "environment", "created_by"
    ).get(pk=stored["cluster_id"])
    url = settings.SITE_URL + cluster.get_absolute_url()
    context: dict[str, Any] = {
        "cluster": cluster,
        "nodes": list(cluster.nodes.all()),
        "software": cluster.get_software_display(),
        "url": url,
        "retry_url": url + "#actions",
        "create_url": settings.SITE_URL + reverse("clusters:create"),
        "billing_url": settings.SITE_URL + reverse("billing:overview"),
        "environments_url": settings.SITE_URL + reverse("accounts:environments"),
        "failure_reason": Reason(cluster.failure_reason).label if cluster.failure_reason else "",
        "termination_reason": Reason(cluster.termination_reason).label if cluster.termination_reason else "",
        "reason_short": {
            Reason.BALANCE_EXHAUSTED.value: "your balance ran out",
            Reason.BUDGET_REACHED.value: "the monthly budget was reached",
        }.get(cluster.termination_reason, "billing limit reached"),
        "stopped_for_balance": cluster.termination_reason == Reason.BALANCE_EXHAUSTED,
        "stopped_for_budget": cluster.termination_reason == Reason.BUDGET_REACHED,
    }
    if cluster.termination_reason == Reason.USER_REQUESTED:
        context["termination_reason"] = _terminated_by(cluster)
    if cluster.billing_started_at:
        ended = cluster.billing_ended_at or cluster.terminated_at or timezone.now()
        billed_seconds = (ended - cluster.billing_started_at).total_seconds()
        context["billed_seconds"] = billed_seconds
        context["duration"] = _duration(billed_seconds)
        context["billing_ended_at"] = ended
    else:
        context["duration"] = ""
    context["total_cost"] = total_cost(cluster)
    # Node health emails name the machine and what the check found.
    for key in ("node_name", "health", "health_label", "health_detail", "is_head"):
        if key in stored:
            context[key] = stored[key]
    return context
