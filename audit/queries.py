"""Reading the log: a workspace's entries, newest first, filtered, a page at a time.

Pages follow a cursor (the last entry's time and id), never an offset or a count: on the index
(workspace, created_at, id) a page costs the same at the millionth entry as at the first.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from dataclasses import dataclass

from django.db.models import Q, QuerySet
from django.utils import timezone

from audit.models import AuditEvent

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


class BadFilter(ValueError):
    """A filter or cursor that cannot be read; `field` names it for the 400."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class Filters:
    actor: str = ""
    action: str = ""
    object: str = ""  # "cluster" or "cluster:12"
    since: dt.datetime | None = None
    until: dt.datetime | None = None

    def apply(self, entries: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        if self.actor:
            entries = entries.filter(actor__iexact=self.actor.strip())
        if self.action:
            action = self.action.strip()
            # "cluster" or "cluster." is every action on clusters; "cluster.terminate" just that one.
            entries = (entries.filter(action=action) if "." in action.rstrip(".")
                       else entries.filter(action__startswith=action.rstrip(".") + "."))
        if self.object:
            kind, _, object_id = self.object.strip().partition(":")
            entries = entries.filter(object_type=kind.strip().lower())
            if object_id.strip():
                entries = entries.filter(object_id=object_id.strip())
        if self.since:
            entries = entries.filter(created_at__gte=self.since)
        if self.until:
            entries = entries.filter(created_at__lt=self.until)
        return entries

    def as_params(self) -> dict[str, str]:
        params = {"actor": self.actor, "action": self.action, "object": self.object,
                  "since": self.since.isoformat() if self.since else "",
                  "until": self.until.isoformat() if self.until else ""}
        return {k: v for k, v in params.items() if v}


def parse_time(field: str, value: str | None) -> dt.datetime | None:
    """An ISO date or date-time (UTC when no zone is given)."""
    text = (value or "").strip()
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise BadFilter(field, "Use a date (2026-01-31) or a date and time (2026-01-31T12:00:00Z).") from None
    return when if timezone.is_aware(when) else when.replace(tzinfo=dt.UTC)


def workspace_entries(workspace_id: int) -> QuerySet[AuditEvent]:
    return AuditEvent.objects.filter(workspace_id=workspace_id).order_by("-created_at", "-id")


def encode_cursor(entry: AuditEvent) -> str:
    raw = f"{entry.created_at.astimezone(dt.UTC).isoformat()}|{entry.pk}"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[dt.datetime, int]:
    try:
        raw = base64.urlsafe_b64decode(cursor.strip() + "=" * (-len(cursor.strip()) % 4)).decode()
        when, _, pk = raw.partition("|")
        created = dt.datetime.fromisoformat(when)
        if not timezone.is_aware(created) or not pk.isdigit() or len(pk) > 18:
            raise ValueError
        return created, int(pk)
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise BadFilter("cursor", "This cursor is not one a page of the audit log gave.") from None


@dataclass(frozen=True)
class Page:
    entries: list[AuditEvent]
    next_cursor: str | None


def page(entries: QuerySet[AuditEvent], *, cursor: str = "", limit: int = DEFAULT_LIMIT) -> Page:
    """Up to `limit` entries after `cursor` (newest first) and the cursor of the page after."""
    if cursor:
        created, pk = decode_cursor(cursor)
        # created_at <= is what the index range starts from (the scan continues where the last
        # page stopped); the OR then drops the rows of that instant already shown.
        entries = entries.filter(Q(created_at__lt=created) | Q(created_at=created, id__lt=pk), created_at__lte=created)
    rows = list(entries[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return Page(rows, encode_cursor(rows[-1]) if more and rows else None)
