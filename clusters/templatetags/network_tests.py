"""The cluster page's Network card: computed by a tag so the page and the live push (which
renders the same partial) show the same thing."""

from __future__ import annotations

from typing import Any

from django import template

from clusters.models import Cluster
from clusters.network_test import card

register = template.Library()


@register.simple_tag
def network_card(cluster: Cluster) -> dict[str, Any]:
    return card.card(cluster)
