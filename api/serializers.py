"""Plain functions turning models and service results into the API's JSON shapes."""

from __future__ import annotations

from typing import Any

from api.http import money, timestamp
from clusters.models import Cluster, ClusterEvent, Node
from offers.models import GPUModel, MachineType
from offers.services import Offer

COMMUNITY_WARNING = "Community host (independent operator): keep secrets off it; volumes cannot be attached."


def gpu_type(gpu: GPUModel) -> dict[str, Any]:
    return {"id": gpu.slug, "name": gpu.slug, "description": gpu.name, "memory_gb": gpu.memory_gb}


def machine_type_summary(machine_type: MachineType) -> dict[str, Any]:
    return {
        "id": machine_type.pk,
        "gpu": machine_type.gpu.slug,
        "gpus_per_machine": machine_type.gpus_per_machine,
        "machine_kind": machine_type.kind,
        "location": machine_type.location.code,
        "location_name": machine_type.location.name,
        "interconnect": machine_type.interconnect,
        "community": machine_type.community,
    }


def offer(item: Offer) -> dict[str, Any]:
    mt = item.machine_type
    data = {
        **machine_type_summary(mt),
        "vcpus": mt.vcpus,
        "memory_gb": mt.memory_gb,
        "disk_gb": mt.disk_gb,
        "machines": item.machines,
        "available_machines": item.available_machines,
        "price_per_machine_hour": money(item.price_per_machine_hour),
        "price_per_cluster_hour": money(item.price_per_cluster_hour),
        "software": item.software_choices,
        "warning": COMMUNITY_WARNING if mt.community else None,
    }
    return data


def node(item: Node) -> dict[str, Any]:
    return {
        "name": item.name,
        "role": item.role,
        "status": item.state,
        # The private address is assigned by index, but only means something once the node joined.
        "private_ip": item.private_ip if item.joined_at else None,
        "step": item.step or None,
        "detail": item.detail or None,
    }


def cluster(item: Cluster) -> dict[str, Any]:
    nodes = sorted(item.nodes.all(), key=lambda n: n.index)
    return {
        "id": item.pk,
        "name": item.name,
        "status": item.status,
        "termination_reason": item.termination_reason or item.failure_reason or None,
        "failure_reason": item.failure_reason or None,
        "environment": item.environment.name,
        "environment_id": item.environment_id,
        "machines": item.machine_count,
        "software": item.software,
        "offer": machine_type_summary(item.machine_type),
        "volume_id": item.volume_id,
        "price_per_machine_hour": money(item.price_per_machine_hour),
        "price_per_hour": money(item.price_per_hour),
        "created_at": timestamp(item.created_at),
        "billing_started_at": timestamp(item.billing_started_at),
        "billing_ended_at": timestamp(item.billing_ended_at),
        "ready_at": timestamp(item.ready_at),
        "terminated_at": timestamp(item.terminated_at),
        "deadline_at": timestamp(item.deadline_at),
        "nodes": [node(n) for n in nodes],
    }


def event(item: ClusterEvent) -> dict[str, Any]:
    return {
        "id": item.pk,
        "created_at": timestamp(item.created_at),
        "actor": item.actor,
        "event": item.event,
        "message": item.message,
        "reason": item.reason or None,
    }


def usage_item(item: dict[str, Any]) -> dict[str, Any]:
    return {
        **item,
        "amount": money(item["amount"]),
        "rows": [
            {
                **row,
                "start": timestamp(row["start"]),
                "end": timestamp(row["end"]),
                "hours": str(row["hours"]),
                "rate": money(row["rate"]),
                "amount": money(row["amount"]),
            }
            for row in item["rows"]
        ],
    }


def quote(item) -> dict[str, Any]:
    return {
        "id": item.pk,
        "status": item.status,
        "contact_name": item.contact_name,
        "email": item.email,
        "company": item.company,
        "gpu": item.gpu,
        "machines": item.machines,
        "network": item.network,
        "term": item.term,
        "term_months": item.term_months,
        "start_date": item.start_date.isoformat() if item.start_date else None,
        "notes": item.notes,
        "created_at": timestamp(item.created_at),
    }


def volume(item) -> dict[str, Any]:
    return {
        "id": item.pk,
        "name": item.name,
        "size_gb": item.size_gb,
        "environment": item.environment.name,
        "created_at": item.created_at.isoformat(),
    }
