"""The machine images an offer can start, for pages outside the clusters app (the Offers page):
offers may not import clusters, so its template asks here."""

from __future__ import annotations

from django import template

from clusters.images import ImageFacts, offer_images
from offers.models import MachineType

register = template.Library()


@register.simple_tag
def images_of(machine_type: MachineType) -> list[ImageFacts] | None:
    return offer_images(machine_type)
