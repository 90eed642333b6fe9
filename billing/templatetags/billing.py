from __future__ import annotations

from typing import Any

from django import template

from billing.queries import balance_summary

register = template.Library()


@register.inclusion_tag("billing/_runway_badge.html", takes_context=True)
def runway(context: template.Context) -> dict[str, Any]:
    """Time left at the current spend, for the top bar (one query beyond the page's own)."""
    workspace = context.get("current_workspace")
    membership = context.get("current_membership")
    if workspace is None:
        return {"summary": None}
    # The Billing page has read the same summary for its own cards: the badge reuses it.
    summary = context.get("summary") if context.get("summary_workspace_id") == workspace.pk else None
    return {"summary": summary or balance_summary(workspace),
            "can_see_billing": bool(membership and membership.can_see_billing)}
