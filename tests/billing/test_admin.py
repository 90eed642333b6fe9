"""Operators' admin: a ledger adjustment moves the balance through billing's service, and says who."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.test import Client
from django.urls import reverse

from billing.models import LedgerEntry
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(db):
    user = UserFactory(username="ops", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


def test_an_adjustment_made_in_the_admin_changes_the_balance_and_names_its_maker(operator, workspace):
    response = operator.post(
        reverse("admin:billing_ledgerentry_add"),
        {"workspace": workspace.pk, "amount": "-25.50", "description": "Refund reversal"},
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    workspace.refresh_from_db()
    assert workspace.credit_balance == Decimal("974.50")
    entry = LedgerEntry.objects.get(workspace=workspace)
    assert entry.kind == LedgerEntry.Kind.ADJUSTMENT and entry.balance_after == Decimal("974.50")
    assert entry.description == "Refund reversal (by ops)"
    log = LogEntry.objects.get(object_id=str(entry.pk))
    assert log.user.username == "ops" and log.action_flag == ADDITION


def test_a_zero_adjustment_is_refused_with_a_field_error(operator, workspace):
    response = operator.post(
        reverse("admin:billing_ledgerentry_add"), {"workspace": workspace.pk, "amount": "0", "description": "x"}
    )
    assert response.status_code == 200 and "other than 0" in response.content.decode()
    assert not LedgerEntry.objects.exists()
