"""Client side of Runcrate Clusters: the HTTP API client, the `runcrate` CLI and the MCP server.

Nothing here imports Django: the client speaks to the JSON API under /api/v1 over HTTP only, so it
can be installed and run on a laptop far from the control plane.
"""

from __future__ import annotations

from runcrate_client.api import ApiError, ClientConfig, ConfigError, Page, RuncrateClient, RuncrateError, TransportError

__all__ = [
    "ApiError",
    "ClientConfig",
    "ConfigError",
    "Page",
    "RuncrateClient",
    "RuncrateError",
    "TransportError",
]
