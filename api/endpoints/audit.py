"""The workspace's audit log (Owners and Managers): who did what, newest first, a cursor page at a time."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router

from api import schemas
from api.app import ApiError, context, invalid, responses
from audit import queries
from audit.models import AuditEvent

router = Router(tags=["Audit log"])


def audit_data(entry: AuditEvent) -> dict[str, Any]:
    return {"id": entry.pk, "created_at": entry.created_at, "actor": entry.actor, "actor_kind": entry.actor_kind,
            "surface": entry.surface, "client_address": entry.client_address, "action": entry.action,
            "object_type": entry.object_type, "object_id": entry.object_id, "object_label": entry.object_label,
            "changes": entry.changes, "cluster_event_id": entry.cluster_event_id}


@router.get("audit-events", operation_id="listAuditEvents",
            summary="The workspace's audit log, newest first (Owners and Managers)",
            description="Every action that changed something in the workspace: who (member, API key prefix or "
                        "Runcrate itself), from where (page, API, CLI, MCP) and what changed. Cursor-paginated: "
                        "pass `meta.next_cursor` as `cursor` for the next page. Kept AUDIT_RETENTION_DAYS "
                        "(400 by default); nobody can change or delete an entry.",
            response=responses({200: schemas.list_envelope(schemas.AuditEvent, meta=schemas.CursorMeta)}, 400, 403))
def list_audit_events(request: HttpRequest, filters: Query[schemas.AuditQuery]) -> dict[str, Any]:
    ctx = context(request)
    if not ctx.membership.can_manage_members:
        raise ApiError(403, "forbidden", "The audit log is read by the workspace's Owners and Managers; "
                       "this key acts for a Developer.")
    try:
        wanted = queries.Filters(actor=filters.actor, action=filters.action, object=filters.object,
                                 since=queries.parse_time("since", filters.since),
                                 until=queries.parse_time("until", filters.until))
        found = queries.page(wanted.apply(queries.workspace_entries(ctx.workspace.pk)),
                             cursor=filters.cursor, limit=filters.limit)
    except queries.BadFilter as error:
        raise invalid({error.field: [error.message]}) from None
    return {"data": [audit_data(e) for e in found.entries], "meta": {"limit": filters.limit, "next_cursor": found.next_cursor}}



