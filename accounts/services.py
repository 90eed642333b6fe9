"""State changes of workspaces, members, environments and SSH keys."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from accounts.models import Environment, Membership, Role, SSHKey, Workspace


@transaction.atomic
def create_workspace(*, name: str, owner, monthly_budget: Decimal = Decimal("1000.00")) -> Workspace:
    workspace = Workspace.objects.create(name=name)
    Membership.objects.create(workspace=workspace, user=owner, role=Role.OWNER)
    Environment.objects.create(workspace=workspace, name="default", is_default=True, monthly_budget=monthly_budget)
    return workspace


@transaction.atomic
def add_member(*, by: Membership, username: str, role: str) -> Membership:
    if not by.can_manage_members:
        raise PermissionDenied("Only Owners and Managers manage members.")
    if role == Role.OWNER and by.role != Role.OWNER:
        raise ValidationError({"role": "Only the Owner can make another Owner."})
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ValidationError({"username": f"No user named {username!r}. They need an account first."})
    if Membership.objects.filter(workspace=by.workspace, user=user).exists():
        raise ValidationError({"username": f"{username} is already a member."})
    return Membership.objects.create(workspace=by.workspace, user=user, role=role)


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


@transaction.atomic
def remove_member(*, by: Membership, membership: Membership) -> None:
    if not by.can_manage_members or (membership.role == Role.OWNER and by.role != Role.OWNER):
        raise PermissionDenied("You cannot remove this member.")
    if membership.role == Role.OWNER and _owner_count_locked(by.workspace) <= 1:
        raise ValidationError("A workspace keeps at least one Owner.")
    membership.delete()


def add_ssh_key(*, workspace: Workspace, name: str, public_key: str, created_by) -> SSHKey:
    key = SSHKey(workspace=workspace, name=name, public_key=public_key, created_by=created_by)
    key.full_clean(exclude=["fingerprint"])
    if SSHKey.objects.filter(workspace=workspace, fingerprint=key.fingerprint).exists():
        raise ValidationError({"public_key": "This key is already in the workspace."})
    key.save()
    return key


def delete_ssh_key(*, workspace: Workspace, key: SSHKey) -> None:
    """Running clusters keep the keys they were created with; new ones no longer get it."""
    SSHKey.objects.filter(pk=key.pk, workspace=workspace).delete()


@transaction.atomic
def create_environment(*, by: Membership, name: str, monthly_budget: Decimal) -> Environment:
    if not by.can_manage_members:
        raise PermissionDenied("Only Owners and Managers create environments.")
    if Environment.objects.filter(workspace=by.workspace, name=name).exists():
        raise ValidationError({"name": "An environment with this name exists."})
    return Environment.objects.create(workspace=by.workspace, name=name, monthly_budget=monthly_budget)


def set_budget(*, by: Membership, environment: Environment, monthly_budget: Decimal) -> None:
    if not by.can_see_billing:
        raise PermissionDenied("Only Owners and Managers set budgets.")
    Environment.objects.filter(pk=environment.pk, workspace=by.workspace).update(monthly_budget=monthly_budget)
