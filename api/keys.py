"""Making, switching off and checking API keys. The full key exists only in the answer to its creation."""

from __future__ import annotations

import datetime as dt
import secrets

from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Membership, Workspace
from api.models import KEY_PREFIX, VISIBLE_CHARS, ApiKey, hash_key
from audit.recording import record

# last_used_at is a hint, not an audit log: write it at most once a minute per key.
LAST_USED_RESOLUTION = dt.timedelta(minutes=1)


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@transaction.atomic
def create_api_key(*, workspace: Workspace, created_by: User | None, name: str) -> tuple[ApiKey, str]:
    """A new key for `workspace`; returns the row and the full key, which is never stored."""
    raw = generate_key()
    api_key = ApiKey.objects.create(
        workspace=workspace, created_by=created_by, name=name.strip() or "API key",
        prefix=raw[: len(KEY_PREFIX) + VISIBLE_CHARS], key_hash=hash_key(raw),
    )
    # The prefix names the key; the key itself and its hash are never logged.
    record(workspace.pk, "api_key.create", api_key, label=api_key.prefix, after={"name": api_key.name})
    return api_key, raw


def can_manage_key(membership: Membership, api_key: ApiKey) -> bool:
    """Who manages a key: the workspace's Owners and Managers, and the key's creator."""
    return api_key.workspace_id == membership.workspace_id and (
        membership.can_manage_members or api_key.created_by_id == membership.user_id)


@transaction.atomic
def set_api_key_active(api_key: ApiKey, active: bool) -> None:
    if active and api_key.revoked_at is not None:
        raise ValidationError("This key was revoked when its creator left the workspace; make a new one.")
    if ApiKey.objects.filter(pk=api_key.pk, revoked_at__isnull=True).update(is_active=active):
        record(api_key.workspace_id, "api_key.activate" if active else "api_key.deactivate", api_key,
               label=api_key.prefix, before={"is_active": api_key.is_active}, after={"is_active": active})
    api_key.is_active = active


def revoke_member_keys(*, workspace_id: int, user_id: int) -> int:
    """Every key `user_id` made in the workspace, switched off for good: called in the same
    transaction that ends their membership."""
    return ApiKey.objects.filter(workspace_id=workspace_id, created_by_id=user_id, revoked_at__isnull=True).update(
        is_active=False, revoked_at=timezone.now()
    )


def revoke_keys_of_ended_membership(*, workspace_id: int, user_id: int, **_: object) -> None:
    """accounts.signals.membership_ended, connected in ApiConfig.ready."""
    revoke_member_keys(workspace_id=workspace_id, user_id=user_id)


@transaction.atomic
def delete_api_key(api_key: ApiKey) -> None:
    record(api_key.workspace_id, "api_key.delete", api_key, label=api_key.prefix, before={"name": api_key.name})
    api_key.delete()


def find_api_key(raw: str) -> ApiKey | None:
    """The key row for a presented key, active or not (callers tell the two apart)."""
    if not raw.startswith(KEY_PREFIX):
        return None
    return ApiKey.objects.select_related("workspace", "created_by").filter(key_hash=hash_key(raw)).first()


def membership_for(api_key: ApiKey) -> Membership | None:
    """The key's creator's membership: the role the key acts with. None once they left the workspace."""
    if api_key.created_by_id is None:
        return None
    return (
        Membership.objects.select_related("workspace", "user")
        .filter(workspace_id=api_key.workspace_id, user_id=api_key.created_by_id, user__is_active=True)
        .first()
    )


def touch_last_used(api_key: ApiKey) -> None:
    """Note the key's use, at most once a minute: the row was just read with the key, so a
    key used within the minute costs no statement at all (a busy key used to send an UPDATE
    with every request)."""
    now = timezone.now()
    if api_key.last_used_at is not None and now - api_key.last_used_at < LAST_USED_RESOLUTION:
        return
    ApiKey.objects.filter(pk=api_key.pk).filter(
        Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - LAST_USED_RESOLUTION)
    ).update(last_used_at=now)
