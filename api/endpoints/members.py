"""Members of the workspace and invitations into it: the Members page's actions, through the
same services (accounts.services) and forms, so the roles and messages are the page's."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.utils import timezone
from ninja import Query, Router, Status

from accounts import services as accounts
from accounts.forms import InviteForm, RoleForm
from accounts.models import Invitation, Membership
from api import schemas
from api.app import ApiContext, ApiError, context, form_data, not_found, ok, page, responses

router = Router(tags=["Members"])


def member_data(membership: Membership, ctx: ApiContext) -> dict[str, Any]:
    return {"id": membership.pk, "user_id": membership.user_id, "username": membership.user.get_username(),
            "email": membership.user.email, "role": membership.role, "joined_at": membership.created_at,
            "you": membership.user_id == ctx.membership.user_id}


def invitation_data(invitation: Invitation) -> dict[str, Any]:
    inviter = invitation.invited_by
    return {"id": invitation.pk, "email": invitation.email, "role": invitation.role, "status": invitation.status,
            "invited_by": (inviter.email or inviter.get_username()) if inviter else None,
            "created_at": invitation.created_at, "expires_at": invitation.expires_at}


def _member(ctx: ApiContext, membership_id: int) -> Membership:
    membership = Membership.objects.select_related("user").filter(pk=membership_id, workspace=ctx.workspace).first()
    if membership is None:
        raise not_found("That member")
    return membership


@router.get("members", operation_id="listMembers", summary="Members of the workspace and their roles",
            response=responses({200: schemas.list_envelope(schemas.Member)}, 400))
def list_members(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    ctx = context(request)
    memberships = ctx.workspace.memberships.select_related("user").order_by("role", "user__username", "id")
    result = page(memberships, pages)
    result["data"] = [member_data(m, ctx) for m in result["data"]]
    return result


@router.patch("members/{member_id}", operation_id="changeMemberRole", summary="Change a member's role",
              description="Only the Owner changes roles; a workspace keeps at least one Owner.",
              response=responses({200: schemas.envelope(schemas.Member)}, 400))
def change_member_role(request: HttpRequest, member_id: schemas.PathId, payload: schemas.ChangeRole) -> dict[str, Any]:
    ctx = context(request)
    membership = _member(ctx, member_id)
    role = form_data(RoleForm, payload.model_dump())["role"]
    accounts.change_role(by=ctx.membership, membership=membership, role=role)
    return ok(member_data(_member(ctx, member_id), ctx))


@router.delete("members/{member_id}", operation_id="removeMember", summary="Remove a member from the workspace",
               description="Owners and Managers remove members (only an Owner removes an Owner; one Owner stays). "
                           "Their pending invitations close and their API keys here are revoked for good.",
               response=responses({200: schemas.envelope(schemas.Member)}, 400))
def remove_member(request: HttpRequest, member_id: schemas.PathId) -> dict[str, Any]:
    ctx = context(request)
    membership = _member(ctx, member_id)
    answer = member_data(membership, ctx)
    accounts.remove_member(by=ctx.membership, membership=membership)
    return ok(answer)


def _require_member_managers(ctx: ApiContext, doing: str) -> None:
    if not ctx.membership.can_manage_members:
        raise ApiError(403, "forbidden", f"Only Owners and Managers {doing}; this key acts for a Developer.")


@router.get("invitations", operation_id="listInvitations", summary="Pending invitations into the workspace",
            description="Open ones only (pending, not expired), as the Members page lists them. Owners and Managers.",
            response=responses({200: schemas.list_envelope(schemas.Invitation)}, 400))
def list_invitations(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    ctx = context(request)
    _require_member_managers(ctx, "see invitations")
    pending = Invitation.objects.filter(
        workspace=ctx.workspace, status=Invitation.Status.PENDING, expires_at__gt=timezone.now(),
    ).select_related("invited_by").order_by("-created_at", "-id")
    result = page(pending, pages)
    result["data"] = [invitation_data(i) for i in result["data"]]
    return result


@router.post("invitations", operation_id="createInvitation", summary="Invite an address into the workspace",
             description="Emails the address a link to join with the role. Owners and Managers invite; only an Owner "
                         "invites an Owner.",
             response=responses({201: schemas.envelope(schemas.Invitation)}, 400))
def create_invitation(request: HttpRequest, payload: schemas.CreateInvitation) -> Status:
    ctx = context(request)
    values = form_data(InviteForm, payload.model_dump())
    invitation = accounts.invite_member(by=ctx.membership, **values)
    return Status(201, ok(invitation_data(invitation)))


@router.delete("invitations/{invitation_id}", operation_id="revokeInvitation", summary="Revoke a pending invitation",
               description="Its link stops working at once. 400 when it was already accepted or revoked.",
               response=responses({200: schemas.envelope(schemas.Invitation)}, 400))
def revoke_invitation(request: HttpRequest, invitation_id: schemas.PathId) -> dict[str, Any]:
    ctx = context(request)
    invitation = Invitation.objects.select_related("invited_by").filter(pk=invitation_id, workspace=ctx.workspace).first()
    if invitation is None:
        raise not_found("That invitation")
    accounts.revoke_invitation(by=ctx.membership, invitation=invitation)
    invitation.refresh_from_db()
    return ok(invitation_data(invitation))
