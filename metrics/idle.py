"""Idle spend, noticed, never stopped (docs/metrics.md). After each metrics round: when every
machine of a ready cluster is idle (CPU under IDLE_CPU_PERCENT and GPUs under
IDLE_GPU_PERCENT) the cluster's idle stretch starts (or goes on); once it has lasted the
environment's `idle_notice_hours`, the owner gets one email and the workspace one
`cluster.idle` webhook, and again at most once a day while it stays idle. Any busy round
ends the stretch. The product has no idle stop and keeps none."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from django.db import transaction

from clusters.emails import cluster_context, recipient_ids
from clusters.models import Cluster, Node
from metrics.models import IdleState, NodeSample
from metrics.services import is_idle
from notifications.kinds import Kind, email_context
from notifications.services import notify
from webhooks.events import cluster_summary
from webhooks.models import EventType
from webhooks.services import emit

REPEAT_AFTER = dt.timedelta(days=1)


def _hours(seconds: float) -> str:
    hours, rest = divmod(int(seconds) // 60, 60)
    if not hours:
        return f"{rest} min"
    return f"{hours} h {rest} min" if rest else f"{hours} h"


def check(cluster: Cluster, nodes: list[Node], samples: list[NodeSample], at: dt.datetime) -> bool:
    """Record this round's verdict; True when it sent a notice."""
    answered = {s.node_id for s in samples}
    idle_now = bool(samples) and answered == {n.pk for n in nodes} and all(is_idle(s) for s in samples)
    state, _ = IdleState.objects.get_or_create(cluster=cluster)
    if not idle_now:
        if state.idle_since is not None:
            IdleState.objects.filter(pk=state.pk).update(idle_since=None)
        return False
    if state.idle_since is None:
        IdleState.objects.filter(pk=state.pk, idle_since__isnull=True).update(idle_since=at)
        return False
    hours = cluster.environment.idle_notice_hours
    idle_for = at - state.idle_since
    if not hours or idle_for < dt.timedelta(hours=float(hours)):
        return False
    if state.last_notice_at is not None and at - state.last_notice_at < REPEAT_AFTER:
        return False
    with transaction.atomic():
        # Compare-and-set on the last notice: two rounds racing send one notice.
        if not IdleState.objects.filter(pk=state.pk, last_notice_at=state.last_notice_at).update(last_notice_at=at):
            return False
        notify_idle(cluster, idle_for.total_seconds(), at)
    return True


def notify_idle(cluster: Cluster, idle_seconds: float, at: dt.datetime) -> None:
    price = str(cluster.price_per_hour.quantize(Decimal("0.01")))
    key = f"cluster:{cluster.pk}:idle:{at.date().isoformat()}"
    notify(Kind.CLUSTER_IDLE, user_ids=recipient_ids(cluster), workspace_id=cluster.workspace_id, dedupe_key=key,
           context={"cluster_id": cluster.pk, "idle_seconds": int(idle_seconds), "price_per_hour": price})
    summary = cluster_summary(cluster)
    emit(cluster.workspace_id, EventType.CLUSTER_IDLE,
         {"cluster": summary, "idle_seconds": int(idle_seconds), "price_per_hour": price,
          "terminate_url": summary["url"] + "#actions"}, dedupe_key=key)


@email_context(Kind.CLUSTER_IDLE)
def idle_context(stored: dict[str, Any]) -> dict[str, Any]:
    context = cluster_context(stored)
    context["idle_for"] = _hours(stored.get("idle_seconds", 0))
    context["price_per_hour"] = stored.get("price_per_hour", "")
    context["terminate_url"] = context["url"] + "#actions"
    return context
