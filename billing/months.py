"""Calendar months as billing counts them (UTC): the one parser for a month someone asks for
(the billing pages' ?month=, the usage API's month) and the one set of month boundaries that
metering, budgets, the usage lines and the exports share."""

from __future__ import annotations

import datetime as dt
import re

from django.utils import timezone

MONTH = re.compile(r"(?P<year>[0-9]{4})-(?P<month>[0-9]{2})")
# From 2000 on (nothing was billed before); the year stops before 9999 because a month's end
# is the first instant of the next month.
FIRST_YEAR, LAST_YEAR = 2000, 9998


class BadMonth(ValueError):
    """A month that is not YYYY-MM, or out of range; the message says how to write one."""


def parse_month(value: str | None) -> dt.date:
    """'YYYY-MM' as the first day of that month; empty means the current month."""
    if not value:
        return month_start(timezone.now())
    match = MONTH.fullmatch(value)
    if not match or not 1 <= int(match["month"]) <= 12:
        raise BadMonth("Use YYYY-MM, e.g. 2026-03.")
    if not FIRST_YEAR <= int(match["year"]) <= LAST_YEAR:
        raise BadMonth(f"Use a month from {FIRST_YEAR} to {LAST_YEAR}.")
    return dt.date(int(match["year"]), int(match["month"]), 1)


def month_start(moment: dt.datetime | dt.date) -> dt.date:
    """The first day of the month `moment` falls in (a ledger entry's period)."""
    return dt.date(moment.year, moment.month, 1)


def next_month_start(moment: dt.datetime | dt.date) -> dt.datetime:
    """The first instant (UTC) of the month after the one `moment` falls in."""
    return dt.datetime(moment.year + (moment.month == 12), moment.month % 12 + 1, 1, tzinfo=dt.UTC)


def month_bounds(year: int, month: int) -> tuple[dt.datetime, dt.datetime]:
    """[first instant, first instant of the next month) in UTC."""
    start = dt.datetime(year, month, 1, tzinfo=dt.UTC)
    return start, next_month_start(start)
