"""The workspace's audit log: one row per action that changed something, never changed itself.

An entry is written only by audit.recording.record, inside the transaction of the change it
describes; nothing edits or deletes it afterwards. The ORM refuses (AuditEventQuerySet and
AuditEvent raise AuditLogImmutable), the admin is read-only, and on PostgreSQL a trigger refuses
UPDATE and DELETE from raw SQL too (migration 0002), except the retention prune
(audit.retention), which announces itself to the trigger for its own transaction.
"""

from __future__ import annotations

from typing import Any, NoReturn

from django.db import models
from django.utils import timezone


class AuditLogImmutable(Exception):
    """An attempt to change or delete an audit entry."""

    def __init__(self) -> None:
        super().__init__("Audit entries cannot be changed or deleted; they expire after the retention period.")


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise AuditLogImmutable


class Surface(models.TextChoices):
    PAGE = "page", "Dashboard"
    API = "api", "API"
    CLI = "cli", "CLI"
    MCP = "mcp", "MCP (agent)"
    ADMIN = "admin", "Operators' console"
    SYSTEM = "system", "Runcrate"


class ActorKind(models.TextChoices):
    MEMBER = "member", "Member"
    API_KEY = "api_key", "API key"
    OPERATOR = "operator", "Runcrate operator"
    SYSTEM = "system", "Runcrate"
    # A failed sign-in: whoever typed the password is not known to be the member.
    UNVERIFIED = "unverified", "Not signed in"


class AuditEventQuerySet(models.QuerySet["AuditEvent"]):
    update = _refuse
    delete = _refuse
    bulk_update = _refuse
    update_or_create = _refuse
    _raw_delete = _refuse


class AuditEvent(models.Model):
    # No database constraint and no cascade: an entry outlives what it names (a removed member,
    # a deleted key, even the workspace row), and a cascade would be a delete the log refuses.
    workspace = models.ForeignKey("accounts.Workspace", on_delete=models.DO_NOTHING, db_constraint=False, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    actor_kind = models.CharField(max_length=20, choices=ActorKind.choices)
    # The user behind the action (the member, the key's creator, the operator); a plain id, not
    # a foreign key, for the same reason as the workspace.
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    # Who, as it read at the time: a username, or the API key's prefix (rc_live_…), or "Runcrate".
    actor = models.CharField(max_length=150)
    surface = models.CharField(max_length=20, choices=Surface.choices)
    client_address = models.GenericIPAddressField(null=True, blank=True)
    action = models.CharField(max_length=60, help_text="What was done, e.g. cluster.terminate.")
    object_type = models.CharField(max_length=40)
    object_id = models.CharField(max_length=40, blank=True)
    object_label = models.CharField(max_length=200, blank=True)
    # {field: [before, after]} for the fields that changed; secrets never appear here.
    changes = models.JSONField(default=dict, blank=True)
    # The cluster event this action recorded, shown beside each other on both pages.
    cluster_event = models.OneToOneField(
        "clusters.ClusterEvent", null=True, blank=True, on_delete=models.DO_NOTHING, db_constraint=False,
        related_name="audit_entry",
    )

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name = "audit entry"
        verbose_name_plural = "audit log"
        indexes = [
            # The list: a workspace's newest first, a page at a time from a (created_at, id) cursor.
            models.Index(fields=["workspace", "created_at", "id"], name="audit_workspace_created"),
            models.Index(fields=["workspace", "action", "created_at", "id"], name="audit_workspace_action"),
            # The retention prune's range.
            models.Index(fields=["created_at"], name="audit_created"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.object_type} {self.object_id}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise AuditLogImmutable
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise AuditLogImmutable

    @property
    def change_lines(self) -> list[tuple[str, Any, Any]]:
        return [(field, pair[0], pair[1]) for field, pair in sorted(self.changes.items())
                if isinstance(pair, list) and len(pair) == 2]
