"""The audit log in the operators' console: to read, never to change (nobody may, superusers included)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from audit.models import AuditEvent


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin):
    list_display = ("created_at", "workspace_id", "actor", "surface", "action", "object_type", "object_id")
    list_filter = ("surface", "actor_kind")
    search_fields = ("actor", "action", "object_label")
    date_hierarchy = "created_at"
    readonly_fields = [f.name for f in AuditEvent._meta.fields]
    actions = None

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
