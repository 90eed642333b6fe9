"""What each product event sends: the hooks the other apps call, inside their transactions.

Cluster events come from the one place the product records them,
clusters.services.common.record_event: an event named in CLUSTER_EVENTS is also a webhook, keyed by
the ClusterEvent row, so a transition that is recorded once is sent once. Billing calls
`balance_low` and `budget_reached`; the idle check calls `cluster_idle`."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings

from webhooks.models import EventType
from webhooks.services import emit

if TYPE_CHECKING:
    from clusters.models import Cluster, ClusterEvent

# ClusterEvent.event -> webhook type
CLUSTER_EVENTS: dict[str, str] = {
    "created": EventType.CLUSTER_CREATED,
    "ready": EventType.CLUSTER_READY,
    "failed": EventType.CLUSTER_FAILED,
    "degraded": EventType.CLUSTER_DEGRADED,
    "terminated": EventType.CLUSTER_TERMINATED,
    "node_unhealthy": EventType.NODE_UNHEALTHY,
    "node_recovered": EventType.NODE_RECOVERED,
    "network_test_finished": EventType.NETWORK_TEST_FINISHED,
}


def cluster_summary(cluster: Cluster) -> dict[str, Any]:
    return {
        "id": cluster.pk,
        "name": cluster.name,
        "status": cluster.status,
        "environment_id": cluster.environment_id,
        "machines": cluster.machine_count,
        "software": cluster.software,
        "price_per_hour": str(cluster.price_per_hour.quantize(Decimal("0.01"))),
        "url": settings.SITE_URL + cluster.get_absolute_url(),
    }


def cluster_event(cluster: Cluster, recorded: ClusterEvent, extra: dict[str, Any] | None = None) -> None:
    event_type = CLUSTER_EVENTS.get(recorded.event)
    if event_type is None:
        return
    data: dict[str, Any] = {"cluster": cluster_summary(cluster), "message": recorded.message, "actor": recorded.actor}
    if recorded.reason:
        data["reason"] = recorded.reason
    data.update(extra or {})
    emit(cluster.workspace_id, event_type, data, dedupe_key=f"cluster-event:{recorded.pk}")


def balance_low(workspace_id: int, context: dict[str, Any], *, key: str) -> None:
    data: dict[str, Any] = {k: context[k] for k in ("balance", "hours_left", "threshold_hours", "rate") if k in context}
    emit(workspace_id, EventType.BALANCE_LOW, data, dedupe_key=key)


def budget_reached(workspace_id: int, environment_id: int, environment_name: str, budget: Decimal,
                   spent: Decimal, month: str, stopped_cluster_ids: list[int]) -> None:
    emit(
        workspace_id, EventType.BUDGET_REACHED,
        {"environment": {"id": environment_id, "name": environment_name}, "budget": str(budget),
         "spent": str(spent), "month": month, "stopped_cluster_ids": stopped_cluster_ids},
        # Once a month per budget: raising the budget and reaching it again is a new event.
        dedupe_key=f"budget-reached:{environment_id}:{month}:{budget}",
    )
