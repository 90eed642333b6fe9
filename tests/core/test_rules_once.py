"""A rule the product keeps is written once: how money reads, how long a balance lasts."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.template import Context, Template

from billing.money import hours_lasting
from config.money import format_money

BASE = Path(settings.BASE_DIR)
SERVER_CODE = [path for app in ("accounts", "api", "audit", "billing", "clusters", "config", "metrics", "notifications",
                                "offers", "quotes", "webhooks") for path in (BASE / app).rglob("*.py")]


def test_money_reads_the_same_in_python_and_in_templates_rounded_as_the_ledger_rounds():
    # Half a cent rounds up on the ledger (to_cents); Python's own format rounds 2.345 to even.
    for amount, shown in [("2.345", "$2.35"), ("1234.5", "$1,234.50"), ("-3.2", "-$3.20"), ("0", "$0.00")]:
        assert format_money(Decimal(amount)) == shown
        assert Template("{{ amount|money }}").render(Context({"amount": Decimal(amount)})) == shown


def test_no_template_formats_dollars_by_hand():
    by_hand = re.compile(r"\$\{\{[^}]*floatformat:2")
    found = [path.relative_to(BASE).as_posix() for path in (BASE / "templates").rglob("*.*") if by_hand.search(path.read_text())]
    assert found == [], "use {{ amount|money }}"


def test_no_server_code_formats_dollars_by_hand():
    by_hand = re.compile(r"\$\{[^{}]+:,?\.2f\}")
    found = [path.relative_to(BASE).as_posix() for path in SERVER_CODE
             if by_hand.search(path.read_text()) and path != BASE / "config" / "money.py"]
    assert found == [], "use config.money.format_money"


def test_runway_is_computed_in_one_place():
    assert hours_lasting(Decimal("10"), Decimal("4")) == Decimal("2.50")
    assert hours_lasting(Decimal("-1"), Decimal("4")) == Decimal("0.00")
    assert hours_lasting(Decimal("10"), Decimal("0")) is None
    dividing = re.compile(r"/\s*(self\.)?(per_hour\w*|usage_rate|rate)\b\)?\s*\)?\.quantize")
    found = [path.relative_to(BASE).as_posix() for path in SERVER_CODE
             if dividing.search(path.read_text()) and path.name != "money.py"]
    assert found == [], "use billing.money.hours_lasting"


def test_cents_are_defined_once():
    defines = re.compile(r"^CENT\s*=", re.MULTILINE)
    assert [path.relative_to(BASE).as_posix() for path in SERVER_CODE if defines.search(path.read_text())] == [
        "config/money.py",
    ]


def test_the_client_keeps_no_list_of_webhook_events_of_its_own():
    from webhooks.models import SUBSCRIBABLE

    named = re.compile("|".join(re.escape(f'"{event}"') for event in SUBSCRIBABLE))
    found = [path.relative_to(BASE).as_posix() for path in (BASE / "runcrate_client").rglob("*.py")
             if len(named.findall(path.read_text())) > 1]
    assert found == [], "the API names the events (a wrong one is refused with the list)"
