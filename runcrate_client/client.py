"""The Python SDK: `Client` is the transport (runcrate_client/api.py) with every endpoint of the
API as a method of a resource, generated from the server's OpenAPI document (endpoints.py).

    from runcrate_client import Client

    with Client("http://127.0.0.1:8000", "rc_live_…") as client:
        for offer in client.catalogue.list_cluster_offers(gpu="H100", machines=2):
            print(offer["id"], offer["price_per_cluster_hour"])

Without arguments it reads RUNCRATE_API_URL / RUNCRATE_API_KEY / RUNCRATE_ENVIRONMENT /
RUNCRATE_WORKSPACE, then ~/.runcrate/config.yaml, as the CLI does.
"""

from __future__ import annotations

import httpx

from runcrate_client.api import DEFAULT_TIMEOUT, ApiError, ClientConfig, Page, Record, Transport
from runcrate_client.endpoints import Resources


class Client(Transport, Resources):
    """Every endpoint of /api/v1, as `client.<resource>.<action>(…)`. Use as a context manager,
    or call `close()`."""

    def __init__(
        self,
        api_url: str | None = None,
        api_key: str | None = None,
        *,
        environment: str | None = None,
        workspace: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        program: str = "sdk",
    ) -> None:
        config = ClientConfig.resolve(api_key=api_key, api_url=api_url, environment=environment, workspace=workspace)
        super().__init__(config.api_key, config.api_url, config.environment, timeout, transport=transport,
                         workspace=config.workspace, program=program)

    @classmethod
    def from_config(cls, config: ClientConfig, timeout: float = DEFAULT_TIMEOUT, program: str = "sdk") -> Client:
        """`program`: "cli" or "mcp" when the CLI or the MCP server makes the calls."""
        return cls(config.api_url, config.api_key, environment=config.environment, workspace=config.workspace,
                   timeout=timeout, program=program)

    # -- conveniences over several calls (not endpoints)

    def find_cluster_id(self, name_or_id: str) -> str:
        """A cluster's id from its id or its name (the live cluster of that name first)."""
        if name_or_id.isascii() and name_or_id.isdigit():
            return name_or_id
        named = [c for c in self.clusters.list_all() if c.get("name") == name_or_id]
        named.sort(key=lambda c: (c.get("status") in ("terminated", "failed"), -int(c.get("id") or 0)))
        if not named:
            raise ApiError(404, "not_found", f"No cluster named {name_or_id!r} in this environment.")
        return str(named[0]["id"])

    def cluster(self, name_or_id: str) -> Record:
        """A cluster by its id or its name."""
        return self.clusters.get(self.find_cluster_id(name_or_id))

    def usage(self, month: str | None = None, *, rows: bool = False) -> Page:
        """A month's every usage line (all pages) with the server's `meta`, whose `total_amount` is
        the month's total as Billing shows it: the client never adds money up itself."""
        first = self.billing.list_usage(month=month, rows=rows or None, limit=200)
        items = list(first.items)
        while len(items) < first.total:
            more = self.billing.list_usage(month=month, rows=rows or None, limit=200, offset=len(items))
            if not more.items:
                break
            items += more.items
        return Page(items=items, total=first.total, limit=None, offset=0, meta=first.meta)
