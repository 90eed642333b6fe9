"""Plain-text rendering for people: aligned tables, money, times. No colours, no dependencies."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from runcrate_client.api import format_money

__all__ = ["cell", "format_hours", "format_money", "format_time", "mask_key", "render_pairs", "render_table"]

COMMUNITY_WARNING = (
    "! community: independent operators' hosts. Keep secrets off them; volumes cannot be attached."
)


def cell(value: Any) -> str:
    """A table cell: '-' for a missing value, '' stays blank, lists joined by commas, the rest as text."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return str(value.get("name") or value.get("id") or value)
    return str(value)


def format_time(value: Any) -> str:
    """ISO 8601 from the API shown as 'YYYY-MM-DD HH:MM:SS' (UTC offset dropped when it is UTC)."""
    if not value:
        return "-"
    text = str(value)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return text
    shown = moment.strftime("%Y-%m-%d %H:%M:%S")
    offset = moment.utcoffset()
    if offset is not None and offset.total_seconds() != 0:
        shown += moment.strftime(" %z")
    return shown


def format_hours(value: Any) -> str:
    if value is None or value == "":
        return "-"
    try:
        return f"{float(value):,.2f} h"
    except (TypeError, ValueError):
        return str(value)


def render_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    right: Iterable[int] = (),
    indent: str = "",
) -> str:
    """Columns padded to their widest cell, two spaces apart; columns in `right` are right-aligned."""
    text_rows = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in text_rows:
        for i, value in enumerate(row):
            widths[i] = max(widths[i], len(value))
    right_set = set(right)

    def line(values: Sequence[str]) -> str:
        padded = [
            value.rjust(widths[i]) if i in right_set else value.ljust(widths[i]) for i, value in enumerate(values)
        ]
        return (indent + "  ".join(padded)).rstrip()

    return "\n".join([line(list(headers)), *(line(r) for r in text_rows)])


def render_pairs(pairs: Sequence[tuple[str, Any]]) -> str:
    """'label:  value' lines with the values aligned."""
    width = max((len(label) for label, _ in pairs), default=0) + 1
    return "\n".join(f"{(label + ':').ljust(width)}  {cell(value)}" for label, value in pairs)


def mask_key(key: str | None) -> str:
    if not key:
        return "-"
    if len(key) <= 16:
        return key[:4] + "…"
    return f"{key[:12]}…{key[-4:]}"
