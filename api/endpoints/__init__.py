"""The /api/v1 endpoints, one module per resource; each registers its router on the app."""

from __future__ import annotations

from api.app import api
from api.endpoints import billing, catalogue, clusters, quotes, volumes

for module in (catalogue, clusters, billing, volumes, quotes):
    api.add_router("", module.router)
