"""Money arithmetic, once: per-second accrual and how long an amount lasts. The bottom of
billing (no models): the ledger, metering, the Billing page, the create plan and the API all
read these, so a figure is computed one way wherever it shows. Cents and how money reads are
config.money's, below every app."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

from config.money import CENT, to_cents

HOURS = Decimal(3600)


def elapsed_seconds(start: dt.datetime, end: dt.datetime) -> Decimal:
    """Exact seconds between two instants (no float rounding of microseconds)."""
    if end <= start:
        return Decimal(0)
    delta = end - start
    return Decimal(delta.days * 86400 + delta.seconds) + Decimal(delta.microseconds) / Decimal(1_000_000)


def accrued(rate: Decimal, start: dt.datetime, end: dt.datetime) -> Decimal:
    """Exact (unrounded) cost of one machine from start to end, accrued per second."""
    return rate * elapsed_seconds(start, end) / HOURS


def posted_total(rate: Decimal, started_at: dt.datetime, until: dt.datetime) -> Decimal:
    """What the ledger holds for a machine billed from `started_at` to `until`: the running
    total rounded to cents, never a sum of rounded pieces, so rounding cannot drift."""
    return to_cents(accrued(rate, started_at, until))


def hours_lasting(amount: Decimal, per_hour: Decimal) -> Decimal | None:
    """Hours `amount` lasts at `per_hour`, to the hundredth (never below zero); None when
    nothing is billed (it lasts forever). The balance's runway and a budget's are this."""
    if per_hour <= 0:
        return None
    return max(amount / per_hour, Decimal(0)).quantize(CENT)
