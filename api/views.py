"""The /api/v1 endpoints: authorize (done by api_route) → validate → call one service → serialize."""

from __future__ import annotations

import datetime as dt
import hashlib
import json

from django.db import IntegrityError, transaction
from django.http import HttpRequest, JsonResponse
from django.utils import timezone

from accounts.models import SSHKey
from api import serializers
from api.http import (
    ApiContext,
    ApiError,
    Fields,
    invalid,
    json_body,
    money,
    not_found,
    ok,
    page,
    parse_id,
)
from api.models import IdempotentRequest
from clusters import services
from clusters.access import get_cluster_for_user
from clusters.models import Cluster, Status, Volume
from clusters.queries import cluster_for_detail, cluster_for_list
from offers.models import GPUModel, MachineType
from offers.services import MAX_MACHINES, MIN_MACHINES, list_offers

IDEMPOTENCY_KEY_MAX = 255


def get_cluster(request: HttpRequest, ctx: ApiContext, cluster_id: str) -> Cluster:
    """The shared workspace-scoped lookup, narrowed to the key's environment: environments
    isolate resources, so a key acting in one never reaches another's clusters (404 either way)."""
    cluster = get_cluster_for_user(request, parse_id(cluster_id, "That cluster"), detail=True)
    if cluster.environment_id != ctx.environment.pk:
        raise not_found("That cluster")
    return cluster


def fresh(cluster: Cluster) -> dict:
    return serializers.cluster(cluster_for_detail(Cluster.objects.filter(pk=cluster.pk)).get())


# -- catalogue ---------------------------------------------------------------------------------


def gpu_types(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    gpus = GPUModel.objects.filter(machine_types__active=True).distinct().order_by("-memory_gb", "slug")
    return page(request, gpus, serializers.gpu_type)


def cluster_offers(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    fields = Fields(request.GET.dict())
    gpu = fields.string("gpu", max_length=30)
    machines = fields.integer("machines", minimum=MIN_MACHINES, maximum=MAX_MACHINES, default=MIN_MACHINES)
    include_community = fields.boolean("include_community")
    fields.check()
    assert machines is not None
    offers = list_offers(gpu or None, machines, include_community=include_community)
    return page(request, offers, serializers.offer)


# -- clusters ----------------------------------------------------------------------------------


def list_clusters(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    clusters = cluster_for_list(Cluster.objects.filter(environment=ctx.environment))
    status = request.GET.get("status", "")
    if status == "live":
        clusters = clusters.live()
    elif status:
        if status not in Status.values:
            raise invalid({"status": [f"Use live or one of: {', '.join(Status.values)}."]})
        clusters = clusters.filter(status=status)
    return page(request, clusters, serializers.cluster)


def _request_fingerprint(ctx: ApiContext, body: dict) -> str:
    canonical = json.dumps({"environment": ctx.environment.pk, "body": body}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _replay(record: IdempotentRequest, fingerprint: str) -> JsonResponse:
    if record.request_hash != fingerprint:
        raise ApiError(409, "idempotency_key_reused", "This Idempotency-Key was already used for a different "
                       "request; use a new key for a new cluster.")
    return JsonResponse(record.response_body, status=record.status_code, headers={"Idempotent-Replayed": "true"})


def create_cluster(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    body = json_body(request)
    idempotency_key = request.headers.get("Idempotency-Key", "").strip()
    if len(idempotency_key) > IDEMPOTENCY_KEY_MAX:
        raise invalid({"Idempotency-Key": [f"At most {IDEMPOTENCY_KEY_MAX} characters."]})
    fingerprint = _request_fingerprint(ctx, body)
    stored = IdempotentRequest.objects.filter(api_key=ctx.api_key, workspace=ctx.workspace)
    if idempotency_key and (record := stored.filter(key=idempotency_key).first()):
        return _replay(record, fingerprint)

    fields = Fields(body)
    name = fields.string("name", required=True, max_length=63)
    offer_id = fields.identifier("offer_id", required=True)
    machines = fields.integer("machines", required=True)
    software = fields.string("software", max_length=20, default="none").lower()
    volume_id = fields.identifier("volume_id")
    ssh_key_ids = fields.identifiers("ssh_key_ids")
    fields.check()

    machine_type = MachineType.objects.select_related("gpu", "location").filter(pk=offer_id, active=True).first()
    if machine_type is None:
        raise invalid({"offer_id": ["No such offer; list them with GET /api/v1/cluster-offers."]}, "Unknown offer.")
    volume = None
    if volume_id is not None:
        volume = Volume.objects.filter(pk=volume_id, workspace=ctx.workspace).first()
        if volume is None:
            raise invalid({"volume_id": ["No such volume in this workspace."]}, "Unknown volume.")
    ssh_keys = list(SSHKey.objects.filter(workspace=ctx.workspace, pk__in=ssh_key_ids))
    if len(ssh_keys) != len(ssh_key_ids):
        missing = sorted(set(ssh_key_ids) - {k.pk for k in ssh_keys})
        raise invalid({"ssh_key_ids": [f"No SSH key {i} in this workspace." for i in missing]}, "Unknown SSH key.")

    try:
        # The cluster and the record of its creation commit together: a concurrent retry with
        # the same key either sees the record or fails on its unique constraint and rolls back.
        with transaction.atomic():
            cluster = services.create_cluster(
                environment=ctx.environment, name=name, machine_type=machine_type, machine_count=machines,
                software=software, volume=volume, ssh_keys=ssh_keys, created_by=ctx.api_key.created_by,
                actor=ctx.actor,
            )
            response_body = {"data": fresh(cluster), "meta": {}}
            if idempotency_key:
                IdempotentRequest.objects.create(
                    api_key=ctx.api_key, workspace=ctx.workspace, key=idempotency_key, method="POST",
                    path=request.path, request_hash=fingerprint, status_code=201, response_body=response_body,
                )
    except IntegrityError:
        record = stored.filter(key=idempotency_key).first() if idempotency_key else None
        if record is None:
            raise
        return _replay(record, fingerprint)
    return JsonResponse(response_body, status=201, headers={"Location": f"/api/v1/clusters/{cluster.pk}"})


def cluster_detail(request: HttpRequest, ctx: ApiContext, cluster_id: str) -> JsonResponse:
    return ok(serializers.cluster(get_cluster(request, ctx, cluster_id)))


def terminate_cluster(request: HttpRequest, ctx: ApiContext, cluster_id: str) -> JsonResponse:
    cluster = get_cluster(request, ctx, cluster_id)
    if not services.terminate_cluster(cluster, actor=ctx.actor):
        cluster.refresh_from_db(fields=["status"])
        if cluster.status in (Status.TERMINATED, Status.FAILED):
            raise ApiError(409, "already_terminated", f"{cluster.name} is already {cluster.status}: it holds no machines.")
        # Already terminating: asking again is not an error, the answer is the same.
    return ok(fresh(cluster), status=202)


def cluster_events(request: HttpRequest, ctx: ApiContext, cluster_id: str) -> JsonResponse:
    cluster = get_cluster(request, ctx, cluster_id)
    return page(request, cluster.events.order_by("created_at", "id"), serializers.event)


def retry_install(request: HttpRequest, ctx: ApiContext, cluster_id: str) -> JsonResponse:
    cluster = get_cluster(request, ctx, cluster_id)
    services.retry_install(cluster, actor=ctx.actor)
    return ok(fresh(cluster), status=202)


def add_workers(request: HttpRequest, ctx: ApiContext, cluster_id: str) -> JsonResponse:
    cluster = get_cluster(request, ctx, cluster_id)
    fields = Fields(json_body(request))
    count = fields.integer("count", minimum=1, maximum=MAX_MACHINES - MIN_MACHINES, default=1)
    fields.check()
    assert count is not None
    services.add_workers(cluster, count, actor=ctx.actor)
    return ok(fresh(cluster), status=202)


def terminate_node(request: HttpRequest, ctx: ApiContext, cluster_id: str, node_name: str) -> JsonResponse:
    cluster = get_cluster(request, ctx, cluster_id)
    if node_name not in {n.name for n in cluster.nodes.all()}:
        raise not_found(f"Node {node_name!r} of cluster {cluster.name}")
    services.refuse_node_termination(cluster, node_name)
    raise AssertionError("refuse_node_termination always refuses")  # pragma: no cover


# -- billing and quotes ------------------------------------------------------------------------


def billing_balance(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    from billing import queries as billing_queries

    # Anyone who may create clusters may see whether the balance covers one: the
    # dashboard shows it to every member too. Usage and money movements stay Owner/Manager.
    summary = billing_queries.balance_summary(ctx.workspace)
    now = timezone.now()
    spend = next(
        (row for row in billing_queries.spend_by_environment(ctx.workspace, now.year, now.month)
         if row["environment_id"] == ctx.environment.pk),
        None,
    )
    data = {
        "credits_balance": money(summary["credits_balance"]),
        "active_usage_cost_per_hour": money(summary["active_usage_cost_per_hour"]),
        "hours_remaining": str(summary["hours_remaining"]) if summary["hours_remaining"] is not None else None,
        "environment": ctx.environment.name,
        "monthly_budget": money(ctx.environment.monthly_budget),
        "budget_spent": money(spend["spent"]) if spend else None,
        "budget_remaining": money(max(spend["budget"] - spend["spent"], 0)) if spend else None,
    }
    return ok(data)


def _month(raw: str | None) -> tuple[int, int]:
    if not raw:
        now = timezone.now()
        return now.year, now.month
    try:
        parsed = dt.datetime.strptime(raw, "%Y-%m")
    except ValueError:
        raise invalid({"month": ["Use YYYY-MM, e.g. 2025-06."]}) from None
    if parsed.year < 2000:
        raise invalid({"month": ["Use a month from 2000 on."]})
    return parsed.year, parsed.month


def billing_usage(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    from billing import queries as billing_queries

    ctx.require_billing()
    year, month = _month(request.GET.get("month"))
    items = billing_queries.usage_for_month(ctx.workspace, year, month, environment=ctx.environment)
    return page(request, items, serializers.usage_item, meta={
        "month": f"{year:04d}-{month:02d}", "environment": ctx.environment.name,
        "total_amount": money(sum((i["amount"] for i in items), billing_queries.ZERO)),
    })


# -- volumes -------------------------------------------------------------------------------------


def _volumes(ctx: ApiContext):
    return Volume.objects.filter(environment=ctx.environment).select_related("environment").order_by("name")


def list_volumes(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    return page(request, _volumes(ctx), serializers.volume)


def create_volume(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    fields = Fields(json_body(request))
    name = fields.string("name", required=True, max_length=100)
    size_gb = fields.integer("size_gb", required=True, minimum=1, maximum=100_000)
    fields.check()
    created = services.create_volume(environment=ctx.environment, name=name, size_gb=size_gb)
    return ok(serializers.volume(_volumes(ctx).get(pk=created.pk)), status=201)


def delete_volume(request: HttpRequest, ctx: ApiContext, volume_id: str) -> JsonResponse:
    volume = _volumes(ctx).filter(pk=parse_id(volume_id, "That volume")).first()
    if volume is None:
        raise not_found("That volume")
    data = serializers.volume(volume)
    services.delete_volume(volume)
    return ok(data)


QUOTE_TEXT_FIELDS = ("contact_name", "email", "company", "gpu", "network", "term", "start_date", "notes")


def create_quote(request: HttpRequest, ctx: ApiContext) -> JsonResponse:
    from quotes.services import InvalidQuoteRequest, create_quote_request

    fields = Fields(json_body(request))
    text = {name: fields.string(name, max_length=5000) for name in QUOTE_TEXT_FIELDS}
    machines = fields.integer("machines")
    term_months = fields.integer("term_months")
    fields.check()
    # Required fields go through even when empty so the service reports every problem at once.
    values: dict = {"contact_name": text["contact_name"], "email": text["email"], "gpu": text["gpu"],
                    "machines": "" if machines is None else machines}
    values.update({k: v for k, v in text.items() if v and k not in values})
    if term_months is not None:
        values["term_months"] = term_months
    try:
        quote = create_quote_request(**values, user=ctx.api_key.created_by, source_ip=request.META.get("REMOTE_ADDR"))
    except InvalidQuoteRequest as error:
        raise ApiError(400, "invalid", "Some fields of the quote request are not valid.", error.errors) from None
    return ok(serializers.quote(quote), status=201)
