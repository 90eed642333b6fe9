"""Wipe receipts: every released real machine is checked clean on its host before its slot is
sold again (docs/nodeops.md, "The wipe receipt")."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone

from clusters.models import Cluster, Node
from clusters.services.common import record_event
from clusters.services.hosts import WIPED_WHEN_HOST_RETURNS, checked_at
from offers import inventory
from offers.models import Host, PhysicalHost


def _checked(receipt: dict[str, Any]) -> str:
    return ", ".join(check["check"] for check in receipt["checks"])


def record_wipe_receipts(cluster: Cluster, nodes: list[Node], receipts: dict[int, dict[str, Any] | None]) -> list[int]:
    """One event per released machine saying what was checked and when; a machine with no
    receipt, or one that is not clean, takes its slot out of sale (quarantined, the operators
    told) before the cluster gives it back. Returns the slots taken out of sale."""
    dirty: dict[int, str] = {}
    waiting: list[int] = []
    with transaction.atomic():
        for node in sorted(nodes, key=lambda n: n.index):
            # Taken, not read: a provider kept for another pass must not offer it again.
            receipt = receipts.pop(node.host_id, None)
            if receipt is None and _host_down(node):
                waiting.append(node.host_id)
                record_event(cluster, "wipe_receipt", f"{node.name}'s machine could not be released: its host is not "
                             "answering. It is released and wiped when the host answers again, before anything "
                             "else runs there.")
            elif receipt is None:
                dirty[node.host_id] = f"{node.host.name}: no wipe receipt (its release did not finish)"
                record_event(cluster, "wipe_receipt", f"{node.name}'s machine could not be checked clean after its "
                             "release; it is out of sale until an operator checks it.")
            elif receipt["clean"]:
                record_event(cluster, "wipe_receipt", f"{node.name}'s machine was wiped and checked clean at "
                             f"{checked_at(receipt)}: {_checked(receipt)}.")
            else:
                failing = [check for check in receipt["checks"] if not check["clean"]]
                dirty[node.host_id] = f"{node.host.name}: wipe check failed: " + "; ".join(
                    f"{check['check']} ({check['detail']})" for check in failing)
                record_event(cluster, "wipe_receipt", f"{node.name}'s machine was released but not checked clean at "
                             f"{checked_at(receipt)} ({', '.join(c['check'] for c in failing)} not clean); "
                             "it is out of sale until an operator checks it.")
        if dirty:
            inventory.quarantine_hosts(dirty)
        # Out of sale without another email: the operators were told when the host went down.
        Host.objects.filter(pk__in=waiting, quarantined_at__isnull=True).update(
            quarantined_at=timezone.now(), quarantine_reason=WIPED_WHEN_HOST_RETURNS,
        )
    return sorted([*dirty, *waiting])


def _host_down(node: Node) -> bool:
    physical = node.host.physical_host
    return physical is not None and physical.state == PhysicalHost.State.DOWN
