"""The workspace a key acts in: its workspaces, environments (with budgets and spend) and SSH keys."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Status

from accounts import services as accounts
from accounts.forms import BudgetForm, EnvironmentForm, IdleNoticeForm
from accounts.models import Environment, Membership, SSHKey
from api import schemas
from api.app import ApiContext, context, form_data, invalid, not_found, ok, page, responses
from billing.services import budget_remaining, month_to_date_spend

router = Router(tags=["Account"])


@router.get("workspaces", operation_id="listWorkspaces", summary="Workspaces the key's creator belongs to",
            description="`current` marks the key's own workspace, the only one it acts in: to act in another, "
                        "make a key there.",
            response=responses({200: schemas.list_envelope(schemas.Workspace)}, 400))
def list_workspaces(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    ctx = context(request)
    memberships = Membership.objects.filter(user_id=ctx.membership.user_id).select_related("workspace").order_by("workspace__name", "workspace_id")
    result = page(memberships, pages)
    result["data"] = [
        {"id": m.workspace_id, "name": m.workspace.name, "role": m.role, "current": m.workspace_id == ctx.workspace.pk}
        for m in result["data"]
    ]
    return result


@router.get("environments", operation_id="listEnvironments",
            summary="Environments of the workspace, with budgets and month-to-date spend",
            description="Send `X-Environment: <name or id>` to act in one; the default otherwise.",
            response=responses({200: schemas.list_envelope(schemas.Environment)}, 400))
def list_environments(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    ctx = context(request)
    result = page(Environment.objects.filter(workspace=ctx.workspace), pages)
    result["data"] = environment_rows(ctx, result["data"])
    return result


def environment_rows(ctx: ApiContext, environments: list[Environment]) -> list[dict[str, Any]]:

    spent = month_to_date_spend([e.pk for e in environments])
    return [
        {"id": e.pk, "name": e.name, "is_default": e.is_default, "monthly_budget": e.monthly_budget,
         "month_to_date_spend": spent[e.pk], "budget_remaining": budget_remaining(e.monthly_budget, spent[e.pk]),
         "idle_notice_hours": float(e.idle_notice_hours), "current": e.pk == ctx.environment.pk}
        for e in environments
    ]


@router.post("environments", operation_id="createEnvironment", summary="Create an environment with a monthly budget",
             description="Owners and Managers. Act in it with `X-Environment: <name>`.",
             response=responses({201: schemas.envelope(schemas.Environment)}, 400))
def create_environment(request: HttpRequest, payload: schemas.CreateEnvironment) -> Status:
    ctx = context(request)
    values = form_data(EnvironmentForm, payload.model_dump())
    environment = accounts.create_environment(by=ctx.membership, **values)
    return Status(201, ok(environment_rows(ctx, [environment])[0]))


@router.patch("environments/{environment_id}", operation_id="updateEnvironment",
              summary="Set an environment's monthly budget or idle notice",
              description="Owners and Managers. `monthly_budget`: clusters here stop when the month's spend reaches "
                          "it. `idle_notice_hours`: after how many idle hours the cluster's owner is told (0: never).",
              response=responses({200: schemas.envelope(schemas.Environment)}, 400))
def update_environment(request: HttpRequest, environment_id: schemas.PathId,
                       payload: schemas.UpdateEnvironment) -> dict[str, Any]:
    ctx = context(request)
    environment = Environment.objects.filter(workspace=ctx.workspace, pk=environment_id).first()
    if environment is None:
        raise not_found("That environment")
    sent = payload.model_dump(exclude_none=True)
    if not sent:
        raise invalid({"monthly_budget": ["Send monthly_budget, idle_notice_hours or both."]},
                      "Nothing to change.")
    if "monthly_budget" in sent:
        accounts.set_budget(by=ctx.membership, environment=environment,
                            **form_data(BudgetForm, {"monthly_budget": sent["monthly_budget"]}))
    if "idle_notice_hours" in sent:
        accounts.set_idle_notice_hours(by=ctx.membership, environment=environment,
                                       **form_data(IdleNoticeForm, {"idle_notice_hours": sent["idle_notice_hours"]}))
    environment.refresh_from_db()
    return ok(environment_rows(ctx, [environment])[0])


@router.get("ssh-keys", operation_id="listSshKeys", summary="SSH public keys of the workspace",
            description="Pass their ids as `ssh_key_ids` when creating a cluster: every node accepts them for root.",
            response=responses({200: schemas.list_envelope(schemas.SSHKey)}, 400))
def list_ssh_keys(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    return page(SSHKey.objects.filter(workspace=context(request).workspace).order_by("name", "id"), pages)


@router.post("ssh-keys", operation_id="createSshKey", summary="Add an SSH public key to the workspace",
             response=responses({201: schemas.envelope(schemas.SSHKey)}, 400))
def create_ssh_key(request: HttpRequest, payload: schemas.CreateSSHKey) -> Status:
    ctx = context(request)
    key = accounts.add_ssh_key(workspace=ctx.workspace, name=payload.name, public_key=payload.public_key,
                               created_by=ctx.api_key.created_by)
    return Status(201, ok(key))


@router.delete("ssh-keys/{key_id}", operation_id="deleteSshKey", summary="Remove an SSH public key",
               description="Running clusters keep the keys they were created with; new clusters no longer get it.",
               response=responses({200: schemas.envelope(schemas.SSHKey)}))
def delete_ssh_key(request: HttpRequest, key_id: schemas.PathId) -> dict[str, Any]:
    ctx = context(request)
    key = SSHKey.objects.filter(workspace=ctx.workspace, pk=key_id).first()
    if key is None:
        raise not_found("That SSH key")
    accounts.delete_ssh_key(workspace=ctx.workspace, key=key)
    return ok(key)
