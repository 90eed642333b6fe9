"""GPU models and the offers that can start a cluster now."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Query, Router

from api import schemas
from api.app import page, responses
from offers.inventory import list_offers
from offers.models import NETWORK_CAVEAT, GPUModel

router = Router(tags=["Catalogue"])


@router.get("gpu-types", operation_id="listGpuTypes", summary="List GPU models",
            response=responses({200: schemas.list_envelope(schemas.GpuType)}, 400))
def gpu_types(request: HttpRequest, pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    gpus = GPUModel.objects.filter(machine_types__active=True).distinct().order_by("-memory_gb", "slug")
    return page(gpus, pages)


@router.get("cluster-offers", operation_id="listClusterOffers", summary="Offers that can start now",
            description="Only offers with `machines` free machines now, cheapest whole cluster first. Community "
                        "hosts are left out unless `include_community` is true. Priced per machine, never per GPU. "
                        "`interconnect` is each machine's own link; between the machines a cluster gets the "
                        "encrypted private network that `meta.network_caveat` describes.",
            response=responses({200: schemas.list_envelope(schemas.Offer, schemas.OfferListMeta)}, 400))
def cluster_offers(request: HttpRequest, filters: Query[schemas.OfferQuery],
                   pages: Query[schemas.PageQuery]) -> dict[str, Any]:
    offers = list_offers(filters.gpu or None, filters.machines, include_community=filters.include_community)
    return page(offers, pages, network_caveat=NETWORK_CAVEAT)
