"""Quotas: the most GPUs running at once and the most spend a month, per member, role or everyone,
per environment or across them (clusters.quotas)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Status

from accounts import services as accounts
from accounts.forms import QuotaForm
from accounts.models import Quota
from api import schemas
from api.app import ApiContext, context, invalid, not_found, ok, page, responses
from clusters.quotas import QuotaRow, quota_rows

router = Router(tags=["Account"])

# The form's fields under the API's names.
QUOTA_FIELDS = {"member": "member_id", "environment": "environment_id"}


def quota_data(row: QuotaRow) -> dict[str, Any]:
    quota = row.quota
    return {
        "id": quota.pk, "applies_to": quota.subject, "member_id": quota.membership_id, "role": quota.role or None,
        "environment_id": quota.environment_id, "environment": quota.environment.name if quota.environment is not None else None,
        "max_gpus": quota.max_gpus, "monthly_spend": quota.monthly_spend,
        "in_use": [{"who": who, "gpus_running": gpus, "spent_this_month": spent} for who, gpus, spent in row.uses],
        "updated_at": quota.updated_at,
    }


def _row(ctx: ApiContext, quota_id: int) -> dict[str, Any]:
    return next(quota_data(row) for row in quota_rows(ctx.workspace.pk) if row.quota.pk == quota_id)


@router.get("quotas", operation_id="listQuotas", summary="Quotas of the workspace, with what is in use",
            description="Every member can read them; machines count against the member who created their cluster.",
            response=responses({200: schemas.list_envelope(schemas.Quota)}, 400))
def list_quotas(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    return page([quota_data(row) for row in quota_rows(context(request).workspace.pk)], pages)


@router.put("quotas", operation_id="setQuota", summary="Set a quota (Owners)",
            description="For one member (`member_id`), each member with a `role`, or, with neither, everyone "
                        "together; in one environment (`environment_id`) or all of them. Setting the same one again "
                        "changes it. A create, added workers or a replacement machine that would pass a quota is "
                        "refused (403, `quota_gpus` or `quota_spend`); a reached spend quota never stops running clusters.",
            response=responses({200: schemas.envelope(schemas.Quota)}, 400))
def set_quota(request: HttpRequest, payload: schemas.SetQuota) -> dict[str, Any]:
    ctx = context(request)
    form = QuotaForm({"member": payload.member_id, "role": payload.role or "", "environment": payload.environment_id,
                      "max_gpus": payload.max_gpus, "monthly_spend": payload.monthly_spend}, workspace=ctx.workspace)
    if not form.is_valid():
        raise invalid({QUOTA_FIELDS.get(name, name): [str(m) for m in messages] for name, messages in form.errors.items()})
    values = form.cleaned_data
    quota = accounts.set_quota(by=ctx.membership, membership=values["member"], role=values["role"],
                               environment=values["environment"], max_gpus=values["max_gpus"],
                               monthly_spend=values["monthly_spend"])
    return ok(_row(ctx, quota.pk))


@router.delete("quotas/{quota_id}", operation_id="deleteQuota", summary="Remove a quota (Owners)",
               response=responses({200: schemas.envelope(schemas.Quota)}))
def delete_quota(request: HttpRequest, quota_id: schemas.PathId) -> Status:
    ctx = context(request)
    quota = Quota.objects.filter(workspace=ctx.workspace, pk=quota_id).first()
    if quota is None:
        raise not_found("That quota")
    data = _row(ctx, quota.pk)
    accounts.delete_quota(by=ctx.membership, quota=quota)
    return Status(200, ok(data))
