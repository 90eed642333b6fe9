"""Money as people type it and as they read it, and rounding to the cent: one place for each.

Shown: `format_money` in Python (messages, emails, events) and the `money` template filter
({{ amount|money }}, a builtin) print "$1,234.50", rounded half up to the cent as the ledger
posts it (`to_cents`); a negative amount reads "-$3.20".

Typed: the ASCII digits 0-9 only.

Python's Decimal (and so Django's DecimalField) reads any Unicode decimal digit: "١٢"
(Arabic-Indic) is 12 and "１２" (full-width) is 12 too. A money amount shown back as "$12"
after someone typed something else is a surprise at best and a way to slip an amount past a
reviewer at worst, so every money input goes through here."""

from __future__ import annotations

import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from django import forms, template

CENT = Decimal("0.01")


def to_cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def format_money(amount: Decimal | int | str) -> str:
    """$1,234.50: dollars to the cent with a thousands separator (-$3.20 when negative)."""
    cents = to_cents(Decimal(str(amount)))
    return f"-${-cents:,.2f}" if cents < 0 else f"${cents:,.2f}"


register = template.Library()  # a builtin of every template (settings.TEMPLATES)


@register.filter(name="money")
def money_filter(amount: Decimal | int | str | None) -> str:
    return "" if amount is None or amount == "" else format_money(amount)


# Digits, at most one point, nothing else (no exponent, no sign, no NaN or Infinity).
AMOUNT = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)", re.ASCII)
ASCII_DIGITS_MESSAGE = "Enter an amount in dollars with the digits 0-9, e.g. 50 or 12.50."


def parse_amount(text: str) -> Decimal | None:
    """The amount `text` spells ("$1,250.50" and "1250.5" included), or None when it is not one."""
    cleaned = text.strip().removeprefix("$").replace(",", "").strip()
    if not AMOUNT.fullmatch(cleaned):
        return None
    try:
        return Decimal(cleaned)
    except InvalidOperation:  # pragma: no cover - the pattern admits only valid decimals
        return None


class AmountField(forms.DecimalField):
    """A DecimalField for money: ASCII digits only, a leading $ and thousands commas allowed."""

    def to_python(self, value: Any) -> Decimal | None:  # type: ignore[override]  # the stubs type it as IntegerField's
        if value in self.empty_values:
            return None
        amount = parse_amount(str(value))
        if amount is None:
            raise forms.ValidationError(ASCII_DIGITS_MESSAGE, code="invalid")
        return amount
