"""The Audit page of a workspace (Owners and Managers): the log, filtered, a page at a time, as CSV."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone

from accounts.http import AuthenticatedHttpRequest
from accounts.tenancy import Tenancy, require_tenancy
from audit import queries
from audit.forms import ACTIONS, AuditFilterForm
from audit.models import AuditEvent


def _require_manager(request: AuthenticatedHttpRequest) -> Tenancy:
    tenancy = require_tenancy(request)
    if not tenancy.membership.can_manage_members:
        raise Http404("The audit log is read by the workspace's Owners and Managers.")
    return tenancy


@login_required
def audit_log(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = _require_manager(request)
    form = AuditFilterForm(request.GET or None)
    entries: list[AuditEvent] = []
    next_cursor = None
    cursor = request.GET.get("cursor", "")
    if form.is_bound and not form.is_valid():
        status = 400
    else:
        status = 200
        filters = form.filters() if form.is_bound else queries.Filters()
        try:
            found = queries.page(filters.apply(queries.workspace_entries(tenancy.workspace.pk)), cursor=cursor)
        except queries.BadFilter:
            raise Http404("That page of the audit log does not exist.") from None
        entries, next_cursor = found.entries, found.next_cursor
    query = urlencode({k: v for k, v in request.GET.items() if k in form.fields and v})
    return render(request, "audit/list.html", {
        "form": form, "entries": entries, "next_cursor": next_cursor, "paged": bool(cursor), "query": query,
        "actions": ACTIONS, "retention_days": settings.AUDIT_RETENTION_DAYS,
    }, status=status)


@login_required
def audit_entry(request: AuthenticatedHttpRequest, entry_id: int) -> HttpResponse:
    tenancy = _require_manager(request)
    entry = queries.workspace_entries(tenancy.workspace.pk).filter(pk=entry_id).first()
    if entry is None:
        raise Http404("No such entry in this workspace's audit log.")
    return render(request, "audit/entry.html", {"entry": entry})


class _Echo:
    def write(self, value: str) -> str:
        return value


CSV_COLUMNS = ["time", "actor", "actor_kind", "surface", "client_address", "action", "object_type", "object_id",
               "object", "changes", "cluster_event_id"]


def _cell(value: str) -> str:
    """A cell a spreadsheet shows as text: names are the customers' own, and one starting with
    = + - @ would otherwise be run as a formula when the file is opened."""
    return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _rows(entries: Iterator[AuditEvent]) -> Iterator[list[str]]:
    yield CSV_COLUMNS
    for e in entries:
        yield [_cell(str(v)) for v in (
            e.created_at.isoformat(), e.actor, e.actor_kind, e.surface, e.client_address or "", e.action,
            e.object_type, e.object_id, e.object_label, json.dumps(e.changes, sort_keys=True), e.cluster_event_id or "",
        )]


@login_required
def audit_export(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Every entry the filters match (not just one page), streamed as CSV."""
    tenancy = _require_manager(request)
    form = AuditFilterForm(request.GET or None)
    if form.is_bound and not form.is_valid():
        return HttpResponse("; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items()),
                            status=400, content_type="text/plain; charset=utf-8")
    filters = form.filters() if form.is_bound else queries.Filters()
    entries = filters.apply(queries.workspace_entries(tenancy.workspace.pk)).iterator(chunk_size=2000)
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse((writer.writerow(row) for row in _rows(entries)), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="audit-{timezone.now():%Y%m%d-%H%M%S}.csv"'
    return response
