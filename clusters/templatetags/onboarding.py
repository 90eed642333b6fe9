from __future__ import annotations

from typing import Any

from django import template

from clusters.onboarding import getting_started as checklist

register = template.Library()


@register.inclusion_tag("accounts/_getting_started.html", takes_context=True)
def getting_started(context: template.Context) -> dict[str, Any]:
    tenancy = context.get("tenancy")
    steps = checklist(tenancy.membership) if tenancy else None
    return {"steps": steps, "done": sum(step.done for step in steps or [])}
