"""Client side of Runcrate Clusters: the Python SDK (`Client`), the `runcrate` CLI and the MCP server.

Nothing here imports Django: the client speaks to the JSON API under /api/v1 over HTTP only, so it
can be installed and run on a laptop far from the control plane. Its endpoints are generated from
the server's OpenAPI document (runcrate_client/endpoints.py, by runcrate_client/codegen.py).
"""

from __future__ import annotations

from runcrate_client.api import ApiError, ClientConfig, ConfigError, Page, RuncrateError, TransportError
from runcrate_client.client import Client

__all__ = [
    "ApiError",
    "Client",
    "ClientConfig",
    "ConfigError",
    "Page",
    "RuncrateError",
    "TransportError",
]
