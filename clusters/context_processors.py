from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from clusters import rules


def cluster_rules(request: HttpRequest) -> dict[str, Any]:
    """The product's bounds for templates (inputs' min/max), from the one place they are written."""
    return {"cluster_rules": {"min_machines": rules.MIN_MACHINES, "max_machines": rules.MAX_MACHINES,
                              "minimum_balance": rules.minimum_balance()}}
