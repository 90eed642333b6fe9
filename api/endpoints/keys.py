"""API keys of the workspace: the API keys page's actions, through api.keys. A key acts only in
the workspace it was made in, with its creator's role; Owners, Managers and a key's creator
manage it, and a Developer never sees another's key to manage (404, as on the page)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Status

from api import keys, schemas
from api.app import ApiContext, context, form_data, not_found, ok, page, responses
from api.forms import ApiKeyForm
from api.models import ApiKey

router = Router(tags=["API keys"])


def key_data(api_key: ApiKey, ctx: ApiContext) -> dict[str, Any]:
    creator = api_key.created_by
    return {"id": api_key.pk, "name": api_key.name, "prefix": api_key.prefix, "is_active": api_key.is_active,
            "revoked": api_key.revoked_at is not None,
            "created_by": (creator.email or creator.get_username()) if creator else None,
            "created_at": api_key.created_at, "last_used_at": api_key.last_used_at,
            "can_manage": keys.can_manage_key(ctx.membership, api_key)}


def _managed_key(ctx: ApiContext, key_id: int) -> ApiKey:
    api_key = ApiKey.objects.select_related("created_by").filter(pk=key_id, workspace=ctx.workspace).first()
    if api_key is None or not keys.can_manage_key(ctx.membership, api_key):
        raise not_found("That API key")
    return api_key


@router.get("api-keys", operation_id="listApiKeys", summary="API keys of the workspace",
            description="Every key made in this workspace; `can_manage` tells which this key's creator may manage.",
            response=responses({200: schemas.list_envelope(schemas.ApiKeyItem)}, 400))
def list_api_keys(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    ctx = context(request)
    result = page(ApiKey.objects.filter(workspace=ctx.workspace).select_related("created_by"), pages)
    result["data"] = [key_data(k, ctx) for k in result["data"]]
    return result


@router.post("api-keys", operation_id="createApiKey", summary="Make an API key",
             description="The new key acts in this workspace with your role. The whole key is in this answer only.",
             response=responses({201: schemas.envelope(schemas.NewApiKey)}, 400))
def create_api_key(request: HttpRequest, payload: schemas.CreateApiKey) -> Status:
    ctx = context(request)
    name = form_data(ApiKeyForm, payload.model_dump())["name"]
    api_key, raw = keys.create_api_key(workspace=ctx.workspace, created_by=ctx.api_key.created_by, name=name)
    return Status(201, ok({**key_data(api_key, ctx), "key": raw}))


@router.patch("api-keys/{key_id}", operation_id="updateApiKey", summary="Deactivate or reactivate an API key",
              description="A deactivated key is refused until reactivated. A key revoked because its creator left "
                          "cannot be reactivated (400).",
              response=responses({200: schemas.envelope(schemas.ApiKeyItem)}, 400))
def update_api_key(request: HttpRequest, key_id: schemas.PathId, payload: schemas.UpdateApiKey) -> dict[str, Any]:
    ctx = context(request)
    api_key = _managed_key(ctx, key_id)
    keys.set_api_key_active(api_key, payload.is_active)
    api_key.refresh_from_db()
    return ok(key_data(api_key, ctx))


@router.delete("api-keys/{key_id}", operation_id="deleteApiKey", summary="Delete an API key",
               description="Anything using it is refused from now on.",
               response=responses({200: schemas.envelope(schemas.ApiKeyItem)}))
def delete_api_key(request: HttpRequest, key_id: schemas.PathId) -> dict[str, Any]:
    ctx = context(request)
    api_key = _managed_key(ctx, key_id)
    answer = key_data(api_key, ctx)
    keys.delete_api_key(api_key)
    return ok(answer)
