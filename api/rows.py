"""The API's lists built from a bounded number of queries and validated without per-object
resolvers: clusters (with their health and the head's ssh line), instances, a cluster's events
and its network tests.

ninja validates a response object by object through its `resolve_<field>` methods (a getter
wrapped around every object, a root validator per object): thousands of Python calls for a
page of clusters of 64 nodes, and each node's `ssh` line read its host with a query of its own.
Here a page's rows are read as values (one query for the page; the clusters list adds one for
the heads' hosts and one for the unhealthy counts), turned into plain dicts, and validated by
plain pydantic twins of the response schemas (`plain`), in pydantic-core, as the usage API
does. The twins carry the schemas' own fields, types and serializers, so the answer is the same
JSON; the schemas in api/schemas.py stay the OpenAPI document, byte for byte.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Iterable
from typing import Any

from django.db.models import Count, F, QuerySet
from django.http import HttpRequest, HttpResponse
from ninja import Schema
from pydantic import BaseModel, PlainSerializer, TypeAdapter, create_model
from pydantic.fields import FieldInfo

from api import schemas
from api.app import api
from api.schemas import ListMeta, PageQuery
from clusters import connect
from clusters.models import BAD_HEALTH, Cluster, ClusterEvent, NetworkTest, Node, Reason, Status
from clusters.network_test import card

_twins: dict[type, type[BaseModel]] = {}
_lists: dict[type, TypeAdapter[list[Any]]] = {}


def _plain_annotation(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, Schema):
        return plain(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is None or not args:
        return annotation
    swapped = tuple(_plain_annotation(arg) for arg in args)
    if swapped == args:
        return annotation
    if origin is types.UnionType or origin is typing.Union:
        return typing.Union[swapped]  # noqa: UP007 (a tuple of types)
    return origin[swapped]


def _native_timestamps(info: FieldInfo) -> FieldInfo:
    """`info` without the `schemas.timestamp` serializer: pydantic-core writes an aware datetime
    as the same string ("…T05:35:25.217410Z", "…T05:35:25Z"), without a call into Python for
    each of a page's timestamps (tests/api/test_list_queries.py holds them equal).
    The schemas keep the serializer: ninja dumps them to Python objects and its renderer
    (Django's JSON encoder) would cut a bare datetime to milliseconds."""
    kept = [m for m in info.metadata if not (isinstance(m, PlainSerializer) and m.func is schemas.timestamp)]
    if len(kept) == len(info.metadata):
        return info
    info = copy.copy(info)
    info.metadata = kept
    return info


def plain(schema: type[Schema]) -> type[BaseModel]:
    """A plain pydantic model with `schema`'s fields (names, types, serializers, defaults) and
    none of ninja's per-object machinery; nested schemas become twins of their own."""
    if schema not in _twins:
        fields: dict[str, Any] = {
            name: (_plain_annotation(info.annotation), _native_timestamps(info))
            for name, info in schema.model_fields.items()
        }
        _twins[schema] = create_model(schema.__name__, __base__=BaseModel, **fields)
    return _twins[schema]


def _list_of(item: type[Schema]) -> TypeAdapter[list[Any]]:
    if item not in _lists:
        _lists[item] = TypeAdapter(list[plain(item)])  # type: ignore[arg-type, misc]
    return _lists[item]


def answer(request: HttpRequest, item: type[Schema], rows: list[dict[str, Any]], total: int, pages: PageQuery,
           **meta: Any) -> HttpResponse:
    """A list envelope: the rows validated by the item schema's twin and written as JSON by
    pydantic-core in one go (no Python objects between the models and the bytes: dumping to
    dicts and then `json.dumps` took twice as long), with the headers of ninja's renderer.
    Compact JSON: the same document as a validated return value, without the spaces after
    separators."""
    adapter = _list_of(item)
    data = adapter.dump_json(adapter.validate_python(rows))
    envelope = ListMeta(total=total, limit=pages.limit, offset=pages.offset).model_dump(mode="json") | meta
    body = b'{"data":' + data + b',"meta":' + json.dumps(envelope, separators=(",", ":")).encode() + b"}"
    return HttpResponse(body, status=200, content_type=api.get_content_type())


def _window(queryset: QuerySet[Any], pages: PageQuery, total: int | None = None) -> tuple[list[Any], int]:
    """A page of `queryset` and how many it holds (counted here unless the caller knows)."""
    total = queryset.count() if total is None else total
    return (list(queryset[pages.offset:pages.offset + pages.limit]) if pages.offset < total else []), total


# -- clusters -----------------------------------------------------------------------------------

# A node's columns its ssh line is made of (connect.endpoint_of).
_SSH_COLUMNS = ("index", "host__address", "host__name", "host__port", "host__ssh_user", "address")


def _ssh_line(node: dict[str, Any], provider: str, gateway_host: str) -> str:
    """connect.ssh_line for a node read as values (_SSH_COLUMNS) that is in service on a
    connectable cluster."""
    return connect.endpoint_of(
        node["index"], node["host__address"], node["host__name"], node["host__port"], node["host__ssh_user"],
        provider=provider, gateway_host=gateway_host, reported=node["address"],
    ).ssh_command


def cluster_rows(clusters: list[Cluster]) -> list[dict[str, Any]]:
    """Rows of schemas.ClusterSummary for clusters read with their catalogue (cluster_for_list):
    one query for the heads in service and one for the unhealthy counts, whatever the number
    of clusters and nodes."""
    connectable = [c.pk for c in clusters if c.status in connect.CONNECTABLE]
    heads = {
        head["cluster_id"]: head
        for head in Node.objects.filter(cluster_id__in=connectable, index=0, released_at__isnull=True,
                                        replacing__isnull=True).values("cluster_id", *_SSH_COLUMNS)
    } if connectable else {}
    ready = [c.pk for c in clusters if c.status == Status.READY]
    unhealthy = dict(
        Node.objects.filter(cluster_id__in=ready, released_at__isnull=True, health__in=BAD_HEALTH)
        .order_by().values("cluster_id").annotate(count=Count("pk")).values_list("cluster_id", "count")
    ) if ready else {}
    rows = []
    for cluster in clusters:
        machine_type = cluster.machine_type
        head = heads.get(cluster.pk)
        ssh = _ssh_line(head, cluster.provider, machine_type.location.gateway_host) if head else None
        reason = cluster.termination_reason or cluster.failure_reason
        rows.append({
            "id": cluster.pk, "name": cluster.name, "status": cluster.status,
            "termination_reason": reason or None,
            "termination_reason_label": Reason(reason).label if reason else None,
            "failure_reason": cluster.failure_reason or None,
            "environment": cluster.environment.name, "environment_id": cluster.environment_id,
            "workspace_id": cluster.workspace_id,
            "machines": cluster.machine_count, "software": cluster.software, "image": cluster.image or None,
            "offer": {
                "id": machine_type.pk, "gpu": machine_type.gpu.slug, "gpus_per_machine": machine_type.gpus_per_machine,
                "machine_kind": machine_type.kind, "location": machine_type.location.code,
                "location_name": machine_type.location.name, "interconnect": machine_type.interconnect,
                "community": machine_type.community,
            },
            "volume_id": cluster.volume_id, "price_per_machine_hour": cluster.price_per_machine_hour,
            "price_per_hour": cluster.price_per_hour, "created_at": cluster.created_at,
            "billing_started_at": cluster.billing_started_at, "billing_ended_at": cluster.billing_ended_at,
            "ready_at": cluster.ready_at, "terminated_at": cluster.terminated_at, "deadline_at": cluster.deadline_at,
            "unhealthy_nodes": unhealthy.get(cluster.pk, 0), "ssh": ssh,
        })
    return rows


def cluster_page(request: HttpRequest, clusters: QuerySet[Cluster], pages: PageQuery) -> HttpResponse:
    window, total = _window(clusters, pages)
    return answer(request, schemas.ClusterSummary, cluster_rows(window), total, pages)


# -- instances, events, network tests -----------------------------------------------------------

_INSTANCE_COLUMNS = (
    "id", "index", "state", "cluster_id", "cluster__name", "cluster__status", "cluster__environment__name",
    "cluster__machine_type__gpu__slug", "cluster__machine_type__gpus_per_machine", "cluster__machine_type__kind",
    "cluster__machine_type__location__code", "joined_at", "cluster__price_per_machine_hour", "billing_started_at",
    "replacing_id", "released_at", "health", *_SSH_COLUMNS[1:], "cluster__provider",
    "cluster__machine_type__location__gateway_host",
)


def _instance_ssh(node: dict[str, Any]) -> str | None:
    if node["cluster__status"] not in connect.CONNECTABLE or node["released_at"] or node["replacing_id"] is not None:
        return None
    return _ssh_line(node, node["cluster__provider"], node["cluster__machine_type__location__gateway_host"])


def instance_page(request: HttpRequest, instances: QuerySet[Node], pages: PageQuery, total: int) -> HttpResponse:
    window, total = _window(instances.values(*_INSTANCE_COLUMNS), pages, total)
    rows = [
        {
            "id": n["id"], "name": f"node-{n['index']}", "role": "head" if n["index"] == 0 else "worker",
            "status": n["state"], "cluster_id": n["cluster_id"], "cluster_name": n["cluster__name"],
            "cluster_status": n["cluster__status"], "environment": n["cluster__environment__name"],
            "gpu": n["cluster__machine_type__gpu__slug"], "gpus_per_machine": n["cluster__machine_type__gpus_per_machine"],
            "machine_kind": n["cluster__machine_type__kind"], "location": n["cluster__machine_type__location__code"],
            "private_ip": f"10.77.0.{n['index'] + 1}" if n["joined_at"] else None,
            "price_per_hour": n["cluster__price_per_machine_hour"], "billing_started_at": n["billing_started_at"],
            "replaces_instance_id": n["replacing_id"] if n["replacing_id"] is not None and n["released_at"] is None else None,
            "health": n["health"], "ssh": _instance_ssh(n),
        }
        for n in window
    ]
    return answer(request, schemas.Instance, rows, total, pages)


def event_page(request: HttpRequest, events: QuerySet[ClusterEvent], pages: PageQuery) -> HttpResponse:
    window, total = _window(events.values("id", "created_at", "actor", "event", "message", "reason",
                                          audit_event_id=F("audit_entry__id")), pages)
    rows = [{**event, "label": ClusterEvent.label_of(event["event"]), "reason": event["reason"] or None} for event in window]
    return answer(request, schemas.ClusterEvent, rows, total, pages)


def network_test_rows(tests: Iterable[NetworkTest]) -> list[dict[str, Any]]:
    return [
        {
            "id": test.pk, "cluster_id": test.cluster_id, "status": test.status, "trigger": test.trigger,
            "trigger_label": test.get_trigger_display(),
            "method": test.method, "requested_by": test.requested_by, "expected_gbps": test.expected_gbps,
            "nodes": list(test.node_names), "created_at": test.created_at, "started_at": test.started_at,
            "finished_at": test.finished_at, "detail": test.detail or None, "summary": card.summary(test),
        }
        for test in tests
    ]


def network_test_page(request: HttpRequest, tests: QuerySet[NetworkTest], pages: PageQuery) -> HttpResponse:
    window, total = _window(card.with_pairs(tests), pages)
    return answer(request, schemas.NetworkTestItem, network_test_rows(window), total, pages)
