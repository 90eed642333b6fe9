"""Template context for the billing kinds (balance, budget, top-ups, auto-recharge), and the
invitation's (accounts.invitations) registered.

Billing passes JSON-safe values (amounts as strings, ids); this adds the workspace and the
links back to the dashboard."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.urls import NoReverseMatch, reverse

from accounts.invitations import invitation_context
from accounts.models import Workspace
from config.money import format_money
from notifications.kinds import Kind, email_context


def _money(value: object) -> str:
    try:
        return format_money(Decimal(str(value).replace(",", "")))  # notices stored before 2026-12 carry commas
    except (InvalidOperation, ValueError):
        return str(value)


@email_context(Kind.BALANCE_LOW, Kind.TOPUP_RECEIVED, Kind.AUTO_RECHARGE_FAILED)
def billing_context(stored: dict[str, Any]) -> dict[str, Any]:
    context = dict(stored)
    for key in ("balance", "amount", "threshold", "budget", "spent"):
        if key in context and context[key] is not None:
            context[key] = _money(context[key])
    workspace_id = stored.get("workspace_id")
    workspace = Workspace.objects.filter(pk=workspace_id).first() if workspace_id else None
    context["workspace"] = workspace
    context.setdefault("workspace_name", workspace.name if workspace else "your workspace")
    context.setdefault("environment_name", stored.get("environment_name", "Your environment"))
    context.setdefault("percent", stored.get("percent", ""))
    try:
        context["billing_url"] = settings.SITE_URL + reverse("billing:overview")
    except NoReverseMatch:
        context["billing_url"] = settings.SITE_URL
    return context


# Invitations are accounts', which sits below notifications and so cannot register its own.
email_context(Kind.INVITATION)(invitation_context)
