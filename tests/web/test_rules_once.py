"""The product's rules are written once: the bounds in offers.models, reached by the forms, the
pages, the create page's script and the API; one lookup for an offer the customer names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.urls import reverse

from offers.forms import OffersFilterForm
from offers.inventory import find_offer
from offers.models import MACHINE_COUNT_MESSAGES, MAX_MACHINES, MIN_MACHINES, MachineType

pytestmark = pytest.mark.django_db


def test_the_create_page_reads_the_bounds_from_the_rules_and_computes_nothing_in_the_browser(member_client, machine_type):
    text = member_client.get(reverse("clusters:create"), {"machines": "x"}).text
    assert f'min="{MIN_MACHINES}" max="{MAX_MACHINES}"' in text
    assert f"enter {MIN_MACHINES} to {MAX_MACHINES} machines" in text
    # Price, runway, budget and refusals come from the server's plan (the `plan` partial).
    assert "create.js" not in text and 'hx-vals=\'{"partial": "plan"}\'' in text
    scripts = " ".join(p.read_text() for p in Path(settings.BASE_DIR).glob("static/js/*.js"))
    for rederived in ("Community", "dataset.price", "dataset.free", "dataset.budget", "dataset.balance", "Machines"):
        assert rederived not in scripts, rederived


def test_no_page_or_script_of_ours_restates_the_bounds():
    base = Path(settings.BASE_DIR)
    files = [*base.glob("static/js/*.js"), *base.glob("templates/**/*.html")]
    bound = re.compile(rf"(?<![\w.#-]){MAX_MACHINES}(?![\w.%-])")
    assert [str(f.relative_to(base)) for f in files if bound.search(f.read_text())] == []


@pytest.mark.parametrize(("machines", "message"), [
    (str(MAX_MACHINES + 1), MACHINE_COUNT_MESSAGES["max_value"]),
    (str(MIN_MACHINES - 1), MACHINE_COUNT_MESSAGES["min_value"]),
    ("", MACHINE_COUNT_MESSAGES["required"]),
])
def test_the_offers_filter_refuses_a_count_in_the_rules_words(machines, message):
    form = OffersFilterForm({"machines": machines})
    assert not form.is_valid() and form.errors["machines"] == [message]


def test_an_offer_named_by_anything_but_an_active_id_is_not_found(machine_type):
    retired = MachineType.objects.create(
        gpu=machine_type.gpu, location=machine_type.location, kind=machine_type.kind, interconnect=machine_type.interconnect,
        gpus_per_machine=8, price_per_machine_hour=machine_type.price_per_machine_hour, active=False,
    )
    assert find_offer(machine_type.pk) == machine_type
    assert find_offer(str(machine_type.pk)) == machine_type
    for value in (retired.pk, "²", "1" * 19, "-1", True, None, "3.0"):
        assert find_offer(value) is None, value
