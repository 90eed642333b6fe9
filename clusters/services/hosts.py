"""Fleet hosts that die and return (docs/nodeops.md, "A host that dies").

A host that stops answering is marked down: out of sale, its machines' nodes unhealthy, each
of its machines billed up to the instant it was marked down and no further, the operators
emailed. When it answers again, every machine left on it is released and wiped (a wipe
receipt on the cluster that held it) before the host goes back to the state it had, so no
slot is sold again before its last tenant's machine is gone and checked.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from billing.services import end_node_usage
from clusters.models import Cluster, Node
from clusters.services.common import record_event
from notifications.kinds import Kind
from notifications.services import notify
from offers import fleet, inventory
from offers.hostruntime import RuntimeFailed
from offers.models import Host, PhysicalHost

log = logging.getLogger(__name__)

# The quarantine reason of a slot whose machine could not be released because its host was
# down: it is wiped when the host returns and goes back on sale on a clean receipt.
WIPED_WHEN_HOST_RETURNS = "its host is down: released and wiped when it returns"


def checked_at(receipt: dict[str, Any]) -> str:
    """When a wipe receipt's checks ran, as pages say times: "2026-12-06 03:20:35 UTC"."""
    try:
        when = dt.datetime.fromisoformat(receipt["checked_at"]).astimezone(dt.UTC)
    except (KeyError, TypeError, ValueError):
        return str(receipt.get("checked_at", ""))
    return when.strftime("%Y-%m-%d %H:%M:%S UTC")


def _billing_stopped_line(node: Node, at: dt.datetime) -> str:
    return (f"{node.name} is not billed from {at:%Y-%m-%d %H:%M:%S} UTC, when its host stopped answering; "
            "replace it to get a working machine, or terminate the cluster.")


def mark_host_down(host_id: int, at: dt.datetime | None = None) -> bool:
    """The host stopped answering: down, out of sale, and the machines on it stop being billed
    at `at`. Returns whether it was up until now (only then are billing and the email done)."""
    at = at or timezone.now()
    with transaction.atomic():
        # Compare-and-set on the state: two health rounds that both find the host silent stop
        # its billing and email the operators once.
        host = PhysicalHost.objects.select_for_update().filter(pk=host_id).first()
        if host is None or host.state == PhysicalHost.State.DOWN:
            return False
        PhysicalHost.objects.filter(pk=host_id).update(
            state=PhysicalHost.State.DOWN, down_since=at, state_before_down=host.state,
        )
        nodes = list(
            Node.objects.select_related("cluster").filter(host__physical_host_id=host_id, released_at__isnull=True)
            .order_by("cluster_id", "index")
        )
        billed = [node for node in nodes if node.billing_started_at is not None and node.billing_ended_at is None]
        # The usage intervals end at `at`, or at a watermark a metering run already moved past
        # it (a run that read the clock a moment later): never billed twice, never lost.
        end_node_usage([node.pk for node in billed], at)
        Node.objects.filter(pk__in=[node.pk for node in billed]).update(billing_ended_at=at)
        for node in billed:
            record_event(node.cluster, "node_billing_stopped", _billing_stopped_line(node, at))
        notify(
            Kind.HOST_DOWN, recipients=inventory.operator_addresses(),
            context={"host_id": host_id, "down_since": f"{at:%Y-%m-%d %H:%M:%S}",
                     "machines": [{"cluster": node.cluster.name, "node": node.name} for node in nodes]},
            dedupe_key=f"host-down:{host_id}:{at.isoformat()}",
        )
    log.warning("host %s stopped answering: marked down at %s", host.name, at)
    return True


def _last_node(slot: Host) -> Node | None:
    return Node.objects.select_related("cluster").filter(host=slot).order_by("-pk").first()


def _record_receipt(slot: Host, receipt: dict[str, Any] | None) -> bool:
    """The receipt of a leftover machine, on the cluster that last held the slot; whether it is clean."""
    node = _last_node(slot)
    clean = receipt is not None and receipt.get("clean") is True
    if node is not None:
        cluster: Cluster = node.cluster
        if clean:
            assert receipt is not None
            checked = ", ".join(check["check"] for check in receipt["checks"])
            record_event(cluster, "wipe_receipt", f"{node.name}'s machine was wiped and checked clean at "
                         f"{checked_at(receipt)}, after its host answered again: {checked}.")
        else:
            record_event(cluster, "wipe_receipt", f"{node.name}'s machine was released after its host answered again "
                         "but not checked clean; it is out of sale until an operator checks it.")
    return clean


def wipe_returned_host(host_id: int) -> dict[str, Any] | None:
    """If the down host answers again, release and wipe every machine left on it, record a
    receipt for each, and give the host back its state: None while it is still silent.

    Left on it: every machine its runtime lists, the machines of slots still held by a live
    node (its machine is gone after this: the node stays unhealthy and unbilled until it is
    replaced or its cluster ends) and of slots whose release waited for the return (those go
    back on sale on a clean receipt). A receipt that is missing or not clean quarantines the
    slot and tells the operators."""
    host = PhysicalHost.objects.filter(pk=host_id, state=PhysicalHost.State.DOWN).first()
    if host is None:
        return None
    runtime = fleet.runtime_for(host)
    try:
        listed = {machine["key"] for machine in runtime.call("list", timeout=fleet.HOST_ANSWER_SECONDS)["machines"]}
    except RuntimeFailed:
        return None  # still silent: nothing changes
    slots = [
        slot for slot in Host.objects.filter(physical_host=host).order_by("pk")
        if slot.name in listed or slot.quarantine_reason.endswith(WIPED_WHEN_HOST_RETURNS)
        or Node.objects.filter(host=slot, released_at__isnull=True).exists()
    ]
    receipts: dict[int, dict[str, Any] | None] = {}
    for slot in slots:
        try:
            receipts[slot.pk] = runtime.call("release", {"key": slot.name})["receipt"]
        except RuntimeFailed as error:
            log.warning("releasing %s after its host returned: %s", slot.name, error)
            receipts[slot.pk] = None
    returned, dirty = [], {}
    with transaction.atomic():
        for slot in slots:
            waited = slot.quarantine_reason.endswith(WIPED_WHEN_HOST_RETURNS)
            if not _record_receipt(slot, receipts[slot.pk]):
                dirty[slot.pk] = f"{slot.name}: not checked clean after its host answered again"
            elif waited:
                returned.append(slot.pk)
        if returned:
            inventory.return_hosts_to_sale(returned)
        if dirty:
            # A slot whose release waited for the return holds that quarantine; it takes the new reason.
            Host.objects.filter(pk__in=list(dirty), quarantine_reason__endswith=WIPED_WHEN_HOST_RETURNS).update(
                quarantined_at=None, quarantine_reason="",
            )
            inventory.quarantine_hosts(dirty)
        back_to = host.state_before_down or PhysicalHost.State.ON_SALE
        PhysicalHost.objects.filter(pk=host_id, state=PhysicalHost.State.DOWN).update(
            state=back_to, down_since=None, state_before_down="",
        )
    log.warning("host %s answered again: %d machines wiped, %d slots back on sale, %d quarantined",
                host.name, len(slots), len(returned), len(dirty))
    return {"host": host.name, "state": back_to, "wiped": [slot.name for slot in slots],
            "returned": len(returned), "quarantined": len(dirty)}


def wipe_returned_hosts() -> list[dict[str, Any]]:
    """Beat: every down host is asked whether it answers again (one bounded call each)."""
    done = []
    for host_id in PhysicalHost.objects.filter(state=PhysicalHost.State.DOWN).values_list("pk", flat=True):
        outcome = wipe_returned_host(host_id)
        if outcome is not None:
            done.append(outcome)
    return done
