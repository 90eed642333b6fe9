"""The /api/v1 endpoints, one module per resource; each registers its router on the app."""

from __future__ import annotations

from api.app import api
from api.endpoints import (
    account,
    audit,
    billing,
    catalogue,
    clusters,
    instances,
    keys,
    members,
    metrics,
    network_tests,
    quotas,
    quotes,
    volumes,
    webhooks,
)

for module in (catalogue, clusters, network_tests, instances, billing, volumes, account, members, keys, quotas, quotes, webhooks, metrics, audit):
    api.add_router("", module.router)
