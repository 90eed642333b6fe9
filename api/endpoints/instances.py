"""Instances: every machine the workspace runs. Each is a node of a cluster, so it ends with its
cluster and is never terminated on its own (the Instances page reads the same query)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from ninja import Query, Router

from api import rows, schemas
from api.app import context, not_found, responses
from clusters.queries import count_instances, workspace_instance, workspace_instances
from clusters.services import terminate

router = Router(tags=["Instances"])


@router.get("instances", operation_id="listInstances", summary="Every machine the workspace runs",
            description="In the environment named by X-Environment, or in every environment of the workspace "
                        "without it; each is marked with the cluster it belongs to.",
            response=responses({200: schemas.list_envelope(schemas.Instance)}, 400))
def list_instances(request: HttpRequest, pages: Query[schemas.PageQuery]) -> HttpResponse:
    ctx = context(request)
    # Without the header the answer is the whole workspace (the Instances page's view); with it,
    # that environment only, as every other list does.
    environment_id = ctx.environment.pk if request.headers.get("X-Environment", "").strip() else None
    return rows.instance_page(request, workspace_instances(ctx.workspace.pk, environment_id), pages,
                              count_instances(ctx.workspace.pk, environment_id))


@router.delete("instances/{instance_id}", operation_id="terminateInstance",
               summary="Always refused: a cluster's machine ends with its cluster",
               description="Answers 409 node_terminate_refused naming the cluster; terminate the cluster instead "
                           "(DELETE /api/v1/clusters/{id}).",
               response=responses({}, 409))
def terminate_instance(request: HttpRequest, instance_id: schemas.PathId) -> None:
    instance = workspace_instance(context(request).workspace.pk, instance_id)
    if instance is None:
        raise not_found("That instance")
    terminate.terminate_instance(instance)
    raise AssertionError("terminate_instance always refuses")  # pragma: no cover
