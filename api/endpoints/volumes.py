"""Volumes of an environment: attached with volume_id when creating a cluster."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest
from ninja import Query, Router, Status

from api import schemas
from api.app import ApiContext, context, not_found, ok, page, responses
from clusters.models import Volume
from clusters.services import volumes

router = Router(tags=["Volumes"])


def _volumes(ctx: ApiContext) -> QuerySet[Volume]:
    return Volume.objects.filter(environment=ctx.environment).select_related("environment").order_by("name")


@router.get("volumes", operation_id="listVolumes", summary="Volumes of the environment",
            response=responses({200: schemas.list_envelope(schemas.Volume)}, 400))
def list_volumes(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    return page(_volumes(context(request)), pages)


@router.post("volumes", operation_id="createVolume",
             summary="Create a volume (attach it with volume_id when creating a cluster)",
             response=responses({201: schemas.envelope(schemas.Volume)}, 400, 409))
def create_volume(request: HttpRequest, payload: schemas.CreateVolume) -> Status:
    ctx = context(request)
    created = volumes.create_volume(environment=ctx.environment, name=payload.name, size_gb=payload.size_gb)
    return Status(201, ok(_volumes(ctx).get(pk=created.pk)))


@router.delete("volumes/{volume_id}", operation_id="deleteVolume", summary="Delete a volume no live cluster uses",
               response=responses({200: schemas.envelope(schemas.Volume)}, 409))
def delete_volume(request: HttpRequest, volume_id: schemas.PathId) -> dict[str, Any]:
    volume = _volumes(context(request)).filter(pk=volume_id).first()
    if volume is None:
        raise not_found("That volume")
    volumes.delete_volume(volume)
    volume.pk = volume_id  # the answer describes what was deleted; delete() cleared the id
    return ok(volume)
