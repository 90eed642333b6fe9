from __future__ import annotations

from clusters import rules


def cluster_rules(request) -> dict:
    """The product's bounds for templates (inputs' min/max), from the one place they are written."""
    return {"cluster_rules": {"min_machines": rules.MIN_MACHINES, "max_machines": rules.MAX_MACHINES,
                              "minimum_balance": rules.minimum_balance()}}
