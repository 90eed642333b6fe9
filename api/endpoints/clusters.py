"""Clusters: create (all machines at once, or none), follow, grow, retry, terminate."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from django.db import IntegrityError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from ninja import Query, Router, Status

from accounts.models import SSHKey
from api import rows, schemas
from api.app import API_FIELD_NAMES, ApiContext, ApiError, context, from_domain_error, invalid, not_found, ok, responses
from api.models import IdempotentRequest
from clusters import rules
from clusters.access import get_cluster_for_user
from clusters.errors import ClusterError
from clusters.models import FINAL_STATUSES, Cluster, Volume
from clusters.models import Status as ClusterStatus
from clusters.queries import ALL, UnknownStatus, cluster_for_detail, cluster_for_list, clusters_with_status
from clusters.services import create, progress, replace, terminate, volumes, workers
from offers.inventory import find_offer
from offers.models import MachineType

router = Router(tags=["Clusters"])

IDEMPOTENCY_KEY_MAX = 255
CLUSTER = schemas.envelope(schemas.Cluster)


def get_cluster(request: HttpRequest, cluster_id: int) -> Cluster:
    """The shared workspace-scoped lookup, narrowed to the key's environment: environments
    isolate resources, so a key acting in one never reaches another's clusters (404 either way)."""
    cluster = get_cluster_for_user(request, cluster_id, detail=True)
    if cluster.environment_id != context(request).environment.pk:
        raise not_found("That cluster")
    return cluster


def fresh(cluster: Cluster) -> Cluster:
    return cluster_for_detail(Cluster.objects.filter(pk=cluster.pk)).get()


@router.get("clusters", operation_id="listClusters", summary="List clusters",
            description="Clusters of the environment, newest first, each without its nodes: "
                        "`GET /clusters/{cluster_id}` has them, `GET /instances` every machine with its health and ssh line.",
            response=responses({200: schemas.list_envelope(schemas.ClusterSummary)}, 400))
def list_clusters(request: HttpRequest, filters: Query[schemas.ClusterQuery],
                  pages: Query[schemas.PageQuery]) -> HttpResponse:
    try:
        clusters = clusters_with_status(Cluster.objects.filter(environment=context(request).environment), filters.status or ALL)
    except UnknownStatus:
        raise invalid({"status": [f"Use live or one of: {', '.join(ClusterStatus.values)}."]}) from None
    # Built from values (a page of clusters, then all their nodes and hosts in one query) and
    # validated without ninja's per-object resolvers: api/rows.py.
    return rows.cluster_page(request, cluster_for_list(clusters).order_by("-created_at", "-id"), pages)


def _request_fingerprint(ctx: ApiContext, body: dict) -> str:
    canonical = json.dumps({"environment": ctx.environment.pk, "body": body}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _replay(record: IdempotentRequest, fingerprint: str) -> JsonResponse:
    if record.request_hash != fingerprint:
        raise ApiError(409, "idempotency_key_reused", "This Idempotency-Key was already used for a different "
                       "request; use a new key for a new cluster.")
    return JsonResponse(record.response_body, status=record.status_code, headers={"Idempotent-Replayed": "true"})


IDEMPOTENCY_HEADER = {
    "parameters": [{"name": "Idempotency-Key", "in": "header", "required": False,
                    "schema": {"type": "string", "maxLength": IDEMPOTENCY_KEY_MAX}}],
}


@router.post("clusters", operation_id="createCluster", summary="Create a cluster",
             description="Reserves every machine at once, or none. With an `Idempotency-Key` header, a retry with "
                         "the same key and body answers the first result (header `Idempotent-Replayed`); the same "
                         "key with another body is 409 idempotency_key_reused.",
             response=responses({201: CLUSTER}, 400, 402, 409), openapi_extra=IDEMPOTENCY_HEADER)
def create_cluster(request: HttpRequest, payload: schemas.CreateCluster) -> Any:
    ctx = context(request)
    idempotency_key = request.headers.get("Idempotency-Key", "").strip()
    if len(idempotency_key) > IDEMPOTENCY_KEY_MAX:
        raise invalid({"Idempotency-Key": [f"At most {IDEMPOTENCY_KEY_MAX} characters."]})
    fingerprint = _request_fingerprint(ctx, json.loads(request.body or b"{}"))
    stored = IdempotentRequest.objects.filter(api_key=ctx.api_key, workspace=ctx.workspace)
    if idempotency_key and (record := stored.filter(key=idempotency_key).first()):
        return _replay(record, fingerprint)

    machine_type, volume, ssh_keys = _check_create(ctx, payload)
    response_body: dict[str, Any] | None = None
    try:
        # The cluster and the record of its creation commit together: a concurrent retry with
        # the same key either sees the record or fails on its unique constraint and rolls back.
        with transaction.atomic():
            cluster = create.create_cluster(
                environment=ctx.environment, name=payload.name, machine_type=machine_type,
                machine_count=payload.machines, software=payload.software, volume=volume, ssh_keys=ssh_keys,
                created_by=ctx.api_key.created_by, actor=ctx.actor, image=payload.image,
            )
            if idempotency_key:
                response_body = CLUSTER.model_validate(ok(fresh(cluster))).model_dump(mode="json")
                IdempotentRequest.objects.create(
                    api_key=ctx.api_key, workspace=ctx.workspace, key=idempotency_key, method="POST",
                    path=request.path, request_hash=fingerprint, status_code=201, response_body=response_body,
                )
    except IntegrityError:
        record = stored.filter(key=idempotency_key).first() if idempotency_key else None
        if record is None:
            raise
        return _replay(record, fingerprint)
    if response_body is None:
        # Read after the commit: the workspace row lock that serialises creates is not held
        # while the answer is built.
        response_body = CLUSTER.model_validate(ok(fresh(cluster))).model_dump(mode="json")
    return JsonResponse(response_body, status=201, headers={"Location": f"/api/v1/clusters/{cluster.pk}"})


def _ssh_keys(ctx: ApiContext, ids: list[int] | None) -> tuple[list[SSHKey], list[int]]:
    """The keys a create installs (every key of the workspace when it names none), and the
    ids it named that are not the workspace's."""
    keys = SSHKey.objects.filter(workspace=ctx.workspace).order_by("pk")
    if ids is None:
        return list(keys), []
    found = list(keys.filter(pk__in=ids))
    return found, sorted(set(ids) - {key.pk for key in found})


NO_SSH_KEY = ("No SSH key: nobody could log in to these machines. Add one (POST /api/v1/ssh-keys, "
              "`runcrate ssh-keys add`) and create with it.")


def _check_create(
    ctx: ApiContext, payload: schemas.CreateCluster,
) -> tuple[MachineType, Volume | None, list[SSHKey]]:
    """What a create names, looked up, and every refusal that needs no lock at once: one
    refusal answers as itself (its code and status); several answer 400 `invalid` with each
    field's messages, so a client fixes them in one round."""
    refusals: list[ApiError] = []
    machine_type = find_offer(payload.offer_id)
    if machine_type is None:
        refusals.append(invalid({"offer_id": ["No such offer; list them with GET /api/v1/cluster-offers."]},
                                "Unknown offer."))
    volume = None
    if payload.volume_id is not None:
        volume = Volume.objects.filter(pk=payload.volume_id, workspace=ctx.workspace).first()
        if volume is None:
            refusals.append(invalid({"volume_id": ["No such volume in this workspace."]}, "Unknown volume."))
    ssh_keys, missing = _ssh_keys(ctx, payload.ssh_key_ids)
    if missing:
        refusals.append(invalid({"ssh_key_ids": [f"No SSH key {i} in this workspace." for i in missing]},
                                "Unknown SSH key."))
    problems = [
        problem for problem in rules.request_problems(
            environment=ctx.environment, name=payload.name, machine_type=machine_type, machine_count=payload.machines,
            software=payload.software, volume=volume, image=payload.image,
        )
        if not (machine_type is None and problem.field == "offer")  # said once, above
    ]
    if len(refusals) + len(problems) == 1:
        raise refusals[0] if refusals else from_domain_error(problems[0])
    if refusals or problems:
        details: dict[str, list[str]] = {}
        for field_errors in [refusal.details for refusal in refusals] + [problem.field_errors for problem in problems]:
            for field, messages in field_errors.items():
                details.setdefault(API_FIELD_NAMES.get(field, field), []).extend(messages)
        raise invalid(details)
    assert machine_type is not None
    return machine_type, volume, ssh_keys


def _plan_data(plan: create.ClusterPlan, problems: list[ClusterError]) -> dict[str, Any]:
    everything = [*problems, *plan.problems]
    return {
        "can_create": not everything,
        "offer": plan.machine_type,
        "machines": plan.machines,
        "software": plan.software,
        "image": plan.image or None,
        "images": None if plan.images is None else [image.as_dict() for image in plan.images],
        "available_machines": plan.available_machines,
        "price_per_machine_hour": plan.price_per_machine_hour,
        "price_per_hour": plan.price_per_hour,
        "balance": {"credits_balance": plan.balance, "required": plan.required_balance,
                    "covers_one_hour": plan.balance >= plan.required_balance},
        "budget": {"monthly_budget": plan.monthly_budget, "spent": plan.budget_spent, "remaining": plan.budget_remaining,
                   "per_hour_after_create": plan.environment_per_hour + plan.price_per_hour,
                   "hours": None if plan.budget_runway_hours is None else str(plan.budget_runway_hours),
                   "under_one_hour": plan.budget_runway_hours is not None and plan.budget_runway_hours < 1},
        "runway": {"per_hour_after_create": plan.per_hour_after,
                   "hours": None if plan.runway_hours is None else str(plan.runway_hours),
                   "under_one_hour": plan.runway_hours is not None and plan.runway_hours < 1},
        "quotas": [{"id": use.quota.pk, "applies_to": use.label, "max_gpus": use.quota.max_gpus,
                    "gpus_in_use": use.gpus_in_use, "gpus_after_create": use.gpus_after,
                    "monthly_spend": use.quota.monthly_spend, "spent": use.spent}
                   for use in plan.quotas],
        "warnings": plan.warnings,
        "problems": [
            {"code": p.code, "message": p.message,
             "field": None if p.field in (None, "__all__") else API_FIELD_NAMES.get(p.field, p.field)}
            for p in everything
        ],
    }


@router.post("clusters/plan", operation_id="planCluster", summary="Check and price a cluster without creating it",
             description="The same checks as POST /clusters with the same body, and nothing reserved: the price per "
                         "hour, the balance rule (one hour of the whole cluster, never less than $10), the "
                         "environment's budget, the runway of everything the workspace runs once this cluster runs "
                         "too (`runway.under_one_hour` warns), and every refusal with its code in `problems`.",
             response=responses({200: schemas.envelope(schemas.ClusterPlan)}, 400))
def plan_cluster(request: HttpRequest, payload: schemas.CreateCluster) -> dict[str, Any]:
    ctx = context(request)
    problems: list[ClusterError] = []
    machine_type = find_offer(payload.offer_id)
    volume = None
    if payload.volume_id is not None:
        volume = Volume.objects.filter(pk=payload.volume_id, workspace=ctx.workspace).first()
        if volume is None:
            problems.append(ClusterError("volume_not_found", "No such volume in this workspace.", field="volume"))
    ssh_keys, missing = _ssh_keys(ctx, payload.ssh_key_ids)
    problems += [ClusterError("ssh_key_not_found", f"No SSH key {i} in this workspace.", field="ssh_key_ids")
                 for i in missing]
    plan = create.plan_cluster(
        environment=ctx.environment, name=payload.name, machine_type=machine_type, machine_count=payload.machines,
        software=payload.software, volume=volume, created_by_id=ctx.api_key.created_by_id, image=payload.image,
    )
    data = _plan_data(plan, problems)
    if not ssh_keys and not missing:
        data["warnings"] = [*data["warnings"], NO_SSH_KEY]
    return ok({**data, "ssh_key_ids": [key.pk for key in ssh_keys], "workspace_id": ctx.workspace.pk,
               "environment_id": ctx.environment.pk})


@router.get("clusters/{cluster_id}", operation_id="getCluster", summary="A cluster and its nodes",
            response=responses({200: CLUSTER}))
def cluster_detail(request: HttpRequest, cluster_id: schemas.PathId) -> dict[str, Any]:
    return ok(get_cluster(request, cluster_id))


@router.delete("clusters/{cluster_id}", operation_id="terminateCluster", summary="Terminate a cluster",
               description="Every machine stops; billing for the whole cluster ends now.",
               response=responses({202: CLUSTER}, 409))
def terminate_cluster(request: HttpRequest, cluster_id: schemas.PathId) -> Status:
    cluster = get_cluster(request, cluster_id)
    if not terminate.terminate_cluster(cluster, actor=context(request).actor):
        cluster.refresh_from_db(fields=["status"])
        if cluster.status in FINAL_STATUSES:
            raise ApiError(409, "already_terminated", f"{cluster.name} is already {cluster.status}: it holds no machines.")
        # Already terminating: asking again is not an error, the answer is the same.
    return Status(202, ok(fresh(cluster)))


@router.get("clusters/{cluster_id}/events", operation_id="listClusterEvents",
            summary="What happened to a cluster, oldest first",
            response=responses({200: schemas.list_envelope(schemas.ClusterEvent)}, 400))
def cluster_events(request: HttpRequest, cluster_id: schemas.PathId, pages: Query[schemas.PageQuery]) -> HttpResponse:
    cluster = get_cluster(request, cluster_id)
    return rows.event_page(request, cluster.events.order_by("created_at", "id"), pages)


@router.post("clusters/{cluster_id}/retry-install", operation_id="retryInstall",
             summary="Retry the software install of a degraded cluster", response=responses({202: CLUSTER}, 409))
def retry_install(request: HttpRequest, cluster_id: schemas.PathId) -> Status:
    cluster = get_cluster(request, cluster_id)
    progress.retry_install(cluster, actor=context(request).actor)
    return Status(202, ok(fresh(cluster)))


@router.post("clusters/{cluster_id}/volume-sync", operation_id="syncVolume",
             summary="Save the head's volume folder to the attached volume now (a checkpoint)",
             description="Copies /shared/volume on node-0 (/volume on container offers) into the cluster's volume "
                         "while it runs; the cluster's events then say how many bytes and how long "
                         "(volume_synced) or why not (volume_sync_failed: a folder larger than the volume is refused "
                         "whole, and the volume keeps its earlier data). 409: no_volume, cluster_not_running, "
                         "volume_sync_running.",
             response=responses({202: CLUSTER}, 409))
def sync_volume(request: HttpRequest, cluster_id: schemas.PathId) -> Status:
    cluster = get_cluster(request, cluster_id)
    volumes.sync_volume_now(cluster, actor=context(request).actor)
    return Status(202, ok(fresh(cluster)))


@router.post("clusters/{cluster_id}/workers", operation_id="addWorkers", summary="Add workers to a ready cluster",
             description="Workers are reserved now; each is billed from when it is up.",
             response=responses({202: CLUSTER}, 400, 402, 409))
def add_workers(request: HttpRequest, cluster_id: schemas.PathId, payload: schemas.AddWorkers | None = None) -> Status:
    cluster = get_cluster(request, cluster_id)
    workers.add_workers(cluster, payload.count if payload else 1, actor=context(request).actor)
    return Status(202, ok(fresh(cluster)))


@router.delete("clusters/{cluster_id}/nodes/{node_name}", operation_id="terminateNode",
               summary="Always refused: a node ends with its cluster",
               description="Answers 409 node_terminate_refused: terminate the whole cluster instead.",
               response=responses({}, 409))
def terminate_node(request: HttpRequest, cluster_id: schemas.PathId, node_name: schemas.Text) -> None:
    cluster = get_cluster(request, cluster_id)
    if node_name not in {n.name for n in cluster.nodes.all()}:
        raise not_found(f"Node {node_name!r} of cluster {cluster.name}")
    terminate.refuse_node_termination(cluster, node_name)
    raise AssertionError("refuse_node_termination always refuses")  # pragma: no cover


@router.post("clusters/{cluster_id}/nodes/{node_name}/replace", operation_id="replaceNode",
             summary="Replace a node with a new machine of the same type",
             description="Reserves one machine of the cluster's offer now; it boots, takes the node's name and private "
                         "address, joins the private network and the software, and only then is the old machine "
                         "stopped. The new machine is billed from when it is up, the old one until it stops. 409: "
                         "not_ready, replacement_in_progress, cluster_changing (workers being added), "
                         "head_replace_refused (node-0 runs the controller and /shared), offer_unavailable (no machine "
                         "of this type can start now: nothing else is tried). 402 when the balance does not cover one "
                         "hour of the cluster plus the machine swapped in.",
             response=responses({202: CLUSTER}, 402, 404, 409))
def replace_node(request: HttpRequest, cluster_id: schemas.PathId, node_name: schemas.Text) -> Status:
    cluster = get_cluster(request, cluster_id)
    if node_name not in {n.name for n in cluster.nodes.all() if n.released_at is None}:
        raise not_found(f"Node {node_name!r} of cluster {cluster.name}")
    replace.replace_node(cluster, node_name, actor=context(request).actor)
    return Status(202, ok(fresh(cluster)))
