"""State changes of workspaces, members, environments and SSH keys."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from accounts.models import Environment, Invitation, Membership, Quota, Role, SingleSignOn, SSHKey, Workspace
from accounts.signals import invitation_created, membership_ended
from audit.recording import record

# A new workspace's default environment: enough for a few days of a small cluster, low
# enough that a mistake is noticed. The Owner changes it on the Environments page.
DEFAULT_MONTHLY_BUDGET = Decimal("1000.00")


@transaction.atomic
def create_workspace(*, name: str, owner: User, monthly_budget: Decimal = DEFAULT_MONTHLY_BUDGET) -> Workspace:
    """A workspace with `owner` as its Owner, one default environment and a zero balance."""
    name = name.strip()
    if not name:
        raise ValidationError({"name": "Name your workspace."})
    workspace = Workspace.objects.create(name=name)
    Membership.objects.create(workspace=workspace, user=owner, role=Role.OWNER)
    Environment.objects.create(workspace=workspace, name="default", is_default=True, monthly_budget=monthly_budget)
    record(workspace.pk, "workspace.create", workspace, after={"name": workspace.name})
    return workspace


@transaction.atomic
def rename_workspace(*, by: Membership, name: str) -> None:
    if not by.can_change_roles:
        raise PermissionDenied("Only the Owner renames the workspace.")
    name = name.strip()
    if not name:
        raise ValidationError({"name": "Name your workspace."})
    Workspace.objects.filter(pk=by.workspace_id).update(name=name)
    record(by.workspace_id, "workspace.rename", by.workspace, before={"name": by.workspace.name}, after={"name": name})


def _owner_count_locked(workspace: Workspace) -> int:
    """The workspace's Owners, counted with their rows locked until the caller commits, so two
    Owners demoting or removing each other at once cannot leave the workspace with none.
    (A locking queryset's .count() drops FOR UPDATE, hence the list.)"""
    return len(list(Membership.objects.select_for_update().filter(workspace=workspace, role=Role.OWNER)))


@transaction.atomic
def change_role(*, by: Membership, membership: Membership, role: str) -> None:
    if not by.can_change_roles:
        raise PermissionDenied("Only the Owner changes roles.")
    if membership.role == Role.OWNER and role != Role.OWNER and _owner_count_locked(by.workspace) <= 1:
        raise ValidationError({"role": "A workspace keeps at least one Owner."})
    Membership.objects.filter(pk=membership.pk).update(role=role)
    record(by.workspace_id, "member.role_change", membership, label=membership.user.get_username(),
           before={"role": membership.role}, after={"role": role})


@transaction.atomic
def remove_member(*, by: Membership, membership: Membership) -> None:
    if not by.can_manage_members or (membership.role == Role.OWNER and by.role != Role.OWNER):
        raise PermissionDenied("You cannot remove this member.")
    if membership.role == Role.OWNER and _owner_count_locked(by.workspace) <= 1:
        raise ValidationError("A workspace keeps at least one Owner.")
    _end_membership(membership)
    record(by.workspace_id, "member.remove", membership, label=membership.user.get_username(),
           before={"role": membership.role})


def _end_membership(membership: Membership) -> None:
    """Membership is the one source of access: what the member held through it ends with it, in
    the same transaction. The invitations they sent close (a link they sent must not grant a
    role after they are gone); through `membership_ended`, their API keys here are revoked for
    good (api.keys: re-inviting them does not bring the keys back, they make new ones) and
    their open pages stop receiving this workspace's pushes once this commits (clusters)."""
    Invitation.objects.filter(
        workspace_id=membership.workspace_id, invited_by_id=membership.user_id, status=Invitation.Status.PENDING,
    ).update(status=Invitation.Status.REVOKED)
    membership_ended.send(Membership, workspace_id=membership.workspace_id, user_id=membership.user_id)
    Membership.objects.filter(pk=membership.pk).delete()


@transaction.atomic
def leave_workspace(*, membership: Membership) -> None:
    if membership.role == Role.OWNER and _owner_count_locked(membership.workspace) <= 1:
        raise ValidationError("You are the only Owner: make another member Owner before you leave.")
    _end_membership(membership)
    record(membership.workspace_id, "member.leave", membership, label=membership.user.get_username(),
           before={"role": membership.role})


# --- invitations ------------------------------------------------------------------------


def verified_emails(user: User) -> set[str]:
    from allauth.account.models import EmailAddress

    return {e.lower() for e in EmailAddress.objects.filter(user=user, verified=True).values_list("email", flat=True)}


@transaction.atomic
def invite_member(*, by: Membership, email: str, role: str) -> Invitation:
    """Invite an address into by's workspace with a role, and email it the link (notifications,
    through `invitation_created`)."""
    if not by.can_manage_members:
        raise PermissionDenied("Only Owners and Managers invite members.")
    if role == Role.OWNER and by.role != Role.OWNER:
        raise ValidationError({"role": "Only the Owner can make another Owner."})
    email = get_user_model().objects.normalize_email(email.strip())
    # One invitation at a time per address: the workspace row lock orders concurrent invites.
    Workspace.objects.select_for_update().filter(pk=by.workspace_id).first()
    if Membership.objects.filter(workspace_id=by.workspace_id, user__email__iexact=email).exists():
        raise ValidationError({"email": f"{email} is already a member."})
    open_ones = Invitation.objects.filter(
        workspace_id=by.workspace_id, email__iexact=email, status=Invitation.Status.PENDING, expires_at__gt=timezone.now(),
    )
    if open_ones.exists():
        raise ValidationError({"email": f"{email} has a pending invitation. Revoke it to send a new one."})
    invitation = Invitation.objects.create(
        workspace_id=by.workspace_id, email=email, role=role, invited_by=by.user,
        expires_at=timezone.now() + dt.timedelta(days=settings.INVITATION_MAX_AGE_DAYS),
    )
    invitation_created.send(Invitation, invitation=invitation)
    record(by.workspace_id, "invitation.create", invitation, label=email, after={"email": email, "role": role})
    return invitation


@transaction.atomic
def revoke_invitation(*, by: Membership, invitation: Invitation) -> None:
    if not by.can_manage_members:
        raise PermissionDenied("Only Owners and Managers revoke invitations.")
    revoked = Invitation.objects.filter(
        pk=invitation.pk, workspace_id=by.workspace_id, status=Invitation.Status.PENDING,
    ).update(status=Invitation.Status.REVOKED)
    if not revoked:
        raise ValidationError("This invitation was already accepted or revoked.")
    record(by.workspace_id, "invitation.revoke", invitation, label=invitation.email,
           before={"status": Invitation.Status.PENDING}, after={"status": Invitation.Status.REVOKED})


@transaction.atomic
def accept_invitation(*, user: User, invitation: Invitation) -> Membership:
    """Join the invitation's workspace with its role. Only for the address it was sent to
    (verified on the user's account), once, before it expires."""
    if invitation.email.lower() not in verified_emails(user):
        raise PermissionDenied(f"This invitation was sent to {invitation.email}, not to your account's address.")
    if Membership.objects.filter(workspace_id=invitation.workspace_id, user=user).exists():
        raise ValidationError("You are already a member of this workspace.")
    # The inviter's membership vouches for the invitation: a link from someone who has left, or
    # who may no longer invite (or make Owners), grants nothing.
    inviter = (
        Membership.objects.filter(workspace_id=invitation.workspace_id, user_id=invitation.invited_by_id).first()
        if invitation.invited_by_id is not None else None
    )
    if inviter is None or not inviter.can_manage_members or (invitation.role == Role.OWNER and inviter.role != Role.OWNER):
        raise ValidationError("Whoever sent this invitation can no longer invite members; ask the workspace for a new one.")
    # Compare-and-set: of two tabs (or two people) accepting at once, one wins.
    accepted = Invitation.objects.filter(
        pk=invitation.pk, status=Invitation.Status.PENDING, expires_at__gt=timezone.now(),
    ).update(status=Invitation.Status.ACCEPTED, accepted_by=user, accepted_at=timezone.now())
    if not accepted:
        raise ValidationError("This invitation was already used, revoked or has expired.")
    membership = Membership.objects.create(workspace_id=invitation.workspace_id, user=user, role=invitation.role)
    record(invitation.workspace_id, "invitation.accept", membership, label=user.get_username(),
           after={"role": invitation.role, "email": invitation.email})
    return membership


@transaction.atomic
def add_ssh_key(*, workspace: Workspace, name: str, public_key: str, created_by: User | None) -> SSHKey:
    key = SSHKey(workspace=workspace, name=name, public_key=public_key, created_by=created_by)
    key.full_clean(exclude=["fingerprint"])
    if SSHKey.objects.filter(workspace=workspace, fingerprint=key.fingerprint).exists():
        raise ValidationError({"public_key": "This key is already in the workspace."})
    key.save()
    record(workspace.pk, "ssh_key.add", key, label=key.name, after={"name": key.name, "fingerprint": key.fingerprint})
    return key


def delete_ssh_key(*, workspace: Workspace, key: SSHKey) -> None:
    """Running clusters keep the keys they were created with; new ones no longer get it."""
    with transaction.atomic():
        deleted, _ = SSHKey.objects.filter(pk=key.pk, workspace=workspace).delete()
        if deleted:
            record(workspace.pk, "ssh_key.delete", key, label=key.name,
                   before={"name": key.name, "fingerprint": key.fingerprint})


@transaction.atomic
def create_environment(*, by: Membership, name: str, monthly_budget: Decimal) -> Environment:
    if not by.can_manage_members:
        raise PermissionDenied("Only Owners and Managers create environments.")
    if Environment.objects.filter(workspace=by.workspace, name=name).exists():
        raise ValidationError({"name": "An environment with this name exists."})
    environment = Environment.objects.create(workspace=by.workspace, name=name, monthly_budget=monthly_budget)
    record(by.workspace_id, "environment.create", environment, label=name,
           after={"name": name, "monthly_budget": environment.monthly_budget})
    return environment


@transaction.atomic
def set_budget(*, by: Membership, environment: Environment, monthly_budget: Decimal) -> None:
    if not by.can_see_billing:
        raise PermissionDenied("Only Owners and Managers set budgets.")
    if Environment.objects.filter(pk=environment.pk, workspace=by.workspace).update(monthly_budget=monthly_budget):
        record(by.workspace_id, "environment.budget_change", environment, label=environment.name,
               before={"monthly_budget": environment.monthly_budget}, after={"monthly_budget": monthly_budget})


@transaction.atomic
def set_idle_notice_hours(*, by: Membership, environment: Environment, idle_notice_hours: Decimal) -> None:
    """After how many idle hours (parts of one too) the owner of a ready cluster here is told
    (metrics.idle); 0: never."""
    if not by.can_see_billing:
        raise PermissionDenied("Only Owners and Managers set the idle notice.")
    if Environment.objects.filter(pk=environment.pk, workspace=by.workspace).update(idle_notice_hours=idle_notice_hours):
        record(by.workspace_id, "environment.idle_notice_change", environment, label=environment.name,
               before={"idle_notice_hours": hours_text(environment.idle_notice_hours)},
               after={"idle_notice_hours": hours_text(idle_notice_hours)})


def hours_text(hours: Decimal | int) -> str:
    """2, 0.5, 1.25: a number of hours as typed, without trailing zeros."""
    return f"{Decimal(hours).normalize():f}"


# --- quotas -------------------------------------------------------------------------------


def _quota_fields(quota: Quota) -> dict[str, object]:
    return {"max_gpus": quota.max_gpus, "monthly_spend": quota.monthly_spend}


@transaction.atomic
def set_quota(*, by: Membership, membership: Membership | None = None, role: str = "",
              environment: Environment | None = None, max_gpus: int | None = None,
              monthly_spend: Decimal | None = None) -> Quota:
    """Set (or change) the quota of one member, of each member with `role`, or of everyone
    together (neither), in `environment` or across the workspace (None). Only Owners."""
    if not by.can_change_roles:
        raise PermissionDenied("Only an Owner sets quotas.")
    if membership is not None and role:
        raise ValidationError({"role": "A quota binds one member or one role, not both."})
    if role and role not in Role.values:
        raise ValidationError({"role": f"Pick one of {', '.join(Role.values)}."})
    if membership is not None and membership.workspace_id != by.workspace_id:
        raise ValidationError({"member": "No such member in this workspace."})
    if environment is not None and environment.workspace_id != by.workspace_id:
        raise ValidationError({"environment": "No such environment in this workspace."})
    if max_gpus is None and monthly_spend is None:
        raise ValidationError({"max_gpus": "Set the most GPUs, the most spend a month, or both."})
    # The workspace row lock orders two Owners setting the same quota at once.
    Workspace.objects.select_for_update().filter(pk=by.workspace_id).first()
    quota = Quota.objects.filter(workspace_id=by.workspace_id, membership=membership, role=role,
                                 environment=environment).first()
    before = _quota_fields(quota) if quota is not None else None
    if quota is None:
        quota = Quota(workspace_id=by.workspace_id, membership=membership, role=role, environment=environment)
    quota.max_gpus, quota.monthly_spend = max_gpus, monthly_spend
    quota.save()
    record(by.workspace_id, "quota.set", quota, label=str(quota), before=before, after=_quota_fields(quota))
    return quota


@transaction.atomic
def delete_quota(*, by: Membership, quota: Quota) -> None:
    if not by.can_change_roles:
        raise PermissionDenied("Only an Owner removes quotas.")
    if Quota.objects.filter(pk=quota.pk, workspace_id=by.workspace_id).delete()[0]:
        record(by.workspace_id, "quota.delete", quota, label=str(quota), before=_quota_fields(quota))


def _sso_fields(sso: SingleSignOn) -> dict[str, object]:
    return {"issuer": sso.issuer, "client_id": sso.client_id, "required": sso.required}


@transaction.atomic
def configure_single_sign_on(*, by: Membership, issuer: str, client_id: str, secret: str = "",
                             required: bool = False) -> SingleSignOn:
    """Connect (or change) the workspace's OpenID Connect provider. An empty `secret` keeps the
    one stored. The provider's discovery document must name `issuer` as its issuer
    (accounts.oidc_discovery), so a typo is a field error here, not a failed sign-in later."""
    from accounts.oidc_discovery import check_issuer

    if not by.can_change_roles:
        raise PermissionDenied("Only an Owner connects single sign-on.")
    issuer = issuer.strip().rstrip("/")
    sso = SingleSignOn.objects.select_for_update().filter(workspace_id=by.workspace_id).first()
    if sso is None and not secret:
        raise ValidationError({"secret": "The client secret is required to connect a provider."})
    discovery = check_issuer(issuer)
    before = _sso_fields(sso) if sso is not None else None
    if sso is not None and sso.issuer != issuer:
        _forget_single_sign_on_links(sso)
    sso = sso or SingleSignOn(workspace_id=by.workspace_id)
    sso.issuer, sso.client_id, sso.required = issuer, client_id.strip(), required
    sso.authorization_endpoint = discovery["authorization_endpoint"]
    if secret:
        sso.set_secret(secret)
    sso.save()
    after = _sso_fields(sso)
    if secret:
        after = {**after, "secret": "new"}  # named, never valued (audit.recording.SECRET_FIELDS)
    record(by.workspace_id, "single_sign_on.set", sso, label=issuer, before=before, after=after)
    return sso


@transaction.atomic
def disconnect_single_sign_on(*, by: Membership) -> None:
    """Remove the workspace's provider: members sign in with passwords again, and the links
    people made to it are gone (a provider connected later is linked afresh)."""
    if not by.can_change_roles:
        raise PermissionDenied("Only an Owner removes single sign-on.")
    sso = SingleSignOn.objects.filter(workspace_id=by.workspace_id).first()
    if sso is not None:
        _forget_single_sign_on_links(sso)
        sso.delete()
        record(by.workspace_id, "single_sign_on.remove", sso, label=sso.issuer, before=_sso_fields(sso))


def _forget_single_sign_on_links(sso: SingleSignOn) -> None:
    """Links are to a subject at one issuer: another provider's subject with the same id is
    someone else, so changing or removing the provider unlinks everyone."""
    from allauth.socialaccount.models import SocialAccount

    SocialAccount.objects.filter(provider=sso.provider_id).delete()
