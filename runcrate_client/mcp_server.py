"""The Runcrate Clusters MCP server: lets an agent find, price, create, follow and terminate clusters.

It acts in ONE environment (RUNCRATE_ENVIRONMENT, else the key's default) with ONE API key, through
the same JSON API as the CLI, so the API's rules (balance, budget, access) apply to the agent too.

Spending is gated twice: `create_cluster` only accepts a confirmation token that `plan_cluster`
issued for exactly the same offer, machine count, software, name and price, and that has not
expired. The token is HMAC-signed with a server-side secret (RUNCRATE_MCP_SECRET, else a random
per-process one), so an agent can neither forge one nor reuse it for a different cluster. Its nonce
doubles as the API's Idempotency-Key, so calling `create_cluster` twice with the same token creates
one cluster.

Run it over stdio (`runcrate mcp`, `python -m runcrate_client.mcp_server`) or streamable HTTP
(`--http --port 8765`, endpoint /mcp), where every request must carry `Authorization: Bearer <the
same API key>`; anything else is answered 401.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

import click
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from runcrate_client.api import (
    ApiError,
    ClientConfig,
    ConfigError,
    Record,
    RuncrateClient,
    RuncrateError,
    format_money,
)

MINIMUM_BALANCE = Decimal("10.00")
DEFAULT_TOKEN_TTL = 600.0
TOKEN_PREFIX = "rcplan1"
BUDGET_FIELDS = ("budget_remaining", "monthly_budget_remaining")
PLAN_FIELDS = ("offer_id", "machines", "software", "name", "volume_id", "ssh_key_ids")

F = TypeVar("F", bound=Callable[..., Any])


# -- confirmation tokens -----------------------------------------------------------------------


class PlanTokenError(Exception):
    """The token is missing, forged, expired, or was issued for a different cluster."""


@dataclass
class PlanSigner:
    """Issues and checks HMAC-signed plan tokens. `clock` is injectable for expiry tests."""

    secret: bytes
    ttl: float = DEFAULT_TOKEN_TTL
    clock: Callable[[], float] = time.time
    # nonce -> cluster id, for tokens already spent: a repeat returns the same cluster.
    spent: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls) -> PlanSigner:
        secret = os.environ.get("RUNCRATE_MCP_SECRET")
        ttl = float(os.environ.get("RUNCRATE_MCP_TOKEN_TTL") or DEFAULT_TOKEN_TTL)
        return cls(secret.encode() if secret else secrets.token_bytes(32), ttl)

    def issue(self, plan: dict[str, Any], price_per_hour: str, environment: str | None) -> tuple[str, float]:
        expires_at = self.clock() + self.ttl
        payload = {
            **{k: normalize(k, plan.get(k)) for k in PLAN_FIELDS},
            "price_per_hour": price_per_hour,
            "environment": environment,
            "exp": round(expires_at, 3),
            "nonce": secrets.token_hex(12),
        }
        body = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
        return f"{TOKEN_PREFIX}.{body}.{self._sign(body)}", expires_at

    def verify(self, token: str, request: dict[str, Any], environment: str | None) -> dict[str, Any]:
        """The token's payload, if it is genuine, unexpired, and matches the request exactly."""
        try:
            prefix, body, signature = token.strip().split(".")
        except (ValueError, AttributeError):
            raise PlanTokenError("not a confirmation token: call plan_cluster and pass its confirmation_token") from None
        if prefix != TOKEN_PREFIX or not hmac.compare_digest(signature, self._sign(body)):
            raise PlanTokenError("invalid confirmation token (not issued by this server): call plan_cluster again")
        payload = json.loads(_unb64(body))
        if self.clock() > payload["exp"]:
            raise PlanTokenError("the confirmation token has expired: call plan_cluster again to re-check the price")
        if payload.get("environment") != environment:
            raise PlanTokenError("the confirmation token was issued for another environment")
        mismatched = [
            f"{k} (planned {payload.get(k)!r}, asked {normalize(k, request.get(k))!r})"
            for k in PLAN_FIELDS
            if payload.get(k) != normalize(k, request.get(k))
        ]
        if mismatched:
            raise PlanTokenError(
                "the arguments differ from the plan this token was issued for: " + "; ".join(mismatched)
                + ". Call plan_cluster with the arguments you want."
            )
        return payload

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self.secret, body.encode(), hashlib.sha256).digest())


def normalize(key: str, value: Any) -> Any:
    if key == "software":
        return str(value or "none").lower()
    if key == "ssh_key_ids":
        return sorted(str(v) for v in value) if value else []
    if key == "machines":
        return int(value) if value is not None else None
    if key == "volume_id":
        return str(value) if value else None
    return value


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# -- the server --------------------------------------------------------------------------------


def api_errors_as_tool_errors(fn: F) -> F:
    """Turn API and transport failures into ToolErrors whose text tells the agent what went wrong."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ApiError as error:
            raise ToolError(f"Runcrate API error {error.status} {error.code}: {error}") from error
        except PlanTokenError as error:
            raise ToolError(f"create_cluster refused: {error}") from error
        except RuncrateError as error:
            raise ToolError(f"Runcrate API unavailable: {error}") from error

    return wrapper  # type: ignore[return-value]


def _decimal(value: Any) -> Decimal | None:
    try:
        return Decimal(str(value)) if value is not None and value != "" else None
    except InvalidOperation:
        return None


def build_server(config: ClientConfig, signer: PlanSigner | None = None, client: RuncrateClient | None = None) -> MCPServer:
    # httpx logs every request at INFO; on stdio that is noise on the agent host's stderr.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    client = client or RuncrateClient.from_config(config)
    signer = signer or PlanSigner.from_environment()
    environment = config.environment
    where = f"environment {environment!r}" if environment else "the API key's default environment"

    mcp = MCPServer(
        name="runcrate-clusters",
        title="Runcrate Clusters",
        version="0.1.0",
        log_level="WARNING",
        instructions=(
            f"Runcrate Clusters: GPU clusters of 2-64 machines, billed per machine-hour. You act in {where}; "
            "its monthly budget and the workspace balance cap what you can spend. To start a cluster: "
            "list_cluster_offers (pick an offer for the GPU and machine count) -> plan_cluster (shows the hourly "
            "price and checks the balance; returns a confirmation_token) -> tell the user the price -> "
            "create_cluster with the same arguments and the token -> cluster_status until 'ready'. "
            "Billing runs until delete_cluster. Money values are decimal strings in USD."
        ),
    )
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=True)

    def offers(gpu: str | None, machines: int | None, include_community: bool) -> list[Record]:
        return client.list_cluster_offers(gpu=gpu, machines=machines, include_community=include_community).items

    @mcp.tool(annotations=read_only)
    @api_errors_as_tool_errors
    def list_gpu_types() -> dict[str, Any]:
        """List the GPU models clusters can be built from. Use the `name` as the `gpu` argument of
        list_cluster_offers."""
        return {"gpu_types": client.list_gpu_types().items}

    @mcp.tool(annotations=read_only)
    @api_errors_as_tool_errors
    def list_cluster_offers(gpu: str | None = None, machines: int | None = None, include_community: bool = False) -> dict[str, Any]:
        """List offers that can start a cluster NOW for `machines` machines (2-64) of GPU model `gpu` (e.g. "H100").

        Each offer has an `id` (pass it to plan_cluster), `price_per_cluster_hour` (whole cluster, what
        gets billed) and `price_per_machine_hour`, the `software` it supports (none, slurm, kubernetes,
        ray), location, interconnect and machine kind. Prices are per machine, never per GPU.
        Community offers (independent operators' hosts) are left out unless include_community is true;
        only use them if the user accepts that secrets must stay off them, and no volume can be attached.
        """
        items = offers(gpu, machines, include_community)
        result: dict[str, Any] = {"offers": items, "count": len(items)}
        if any(o.get("community") for o in items):
            result["warning"] = ("Offers with community=true run on independent operators' hosts: keep secrets "
                                 "off them; volumes cannot be attached.")
        if not items:
            result["hint"] = "Nothing can start now for that size: try fewer machines or another GPU."
        return result

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True))
    @api_errors_as_tool_errors
    def plan_cluster(
        offer_id: str, machines: int, name: str, software: str = "none",
        volume_id: str | None = None, ssh_key_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Price a cluster before creating it; REQUIRED before create_cluster. Creates nothing, costs nothing.

        Checks that the offer can start `machines` machines now, that it supports `software` (none,
        slurm, kubernetes, ray), and the balance rule: the balance must cover one hour of the whole
        cluster and never less than $10. Returns the price per hour and, when the cluster can be
        created, a `confirmation_token` valid for a few minutes. Show the user the price, then call
        create_cluster with exactly the same arguments and that token. If `can_create` is false, read
        `problems` and do not call create_cluster.
        """
        plan = {"offer_id": offer_id, "machines": machines, "software": normalize("software", software),
                "name": name, "volume_id": volume_id, "ssh_key_ids": ssh_key_ids or []}
        problems: list[str] = []
        warnings: list[str] = []
        if not name.strip():
            problems.append("name must not be empty")
        if not 2 <= machines <= 64:
            problems.append("machines must be between 2 and 64")
        offer = next((o for o in offers(None, machines, True) if str(o.get("id")) == str(offer_id)), None)
        if offer is None:
            raise ToolError(f"offer {offer_id!r} cannot start {machines} machines now (or does not exist): "
                            "call list_cluster_offers to pick another")
        supported = offer.get("software")
        if isinstance(supported, list) and plan["software"] not in [str(s).lower() for s in supported]:
            problems.append(f"offer {offer_id} does not support {plan['software']} (supports: {', '.join(supported)})")
        if plan["software"] == "kubernetes" and offer.get("machine_kind") not in ("vm", "bare_metal"):
            problems.append("Kubernetes runs only on vm and bare_metal machines")
        if offer.get("community"):
            warnings.append("Community host (independent operator): keep secrets off it.")
            if volume_id:
                problems.append("a volume cannot be attached to a community cluster")
        per_machine = _decimal(offer.get("price_per_machine_hour")) or Decimal(0)
        per_hour = _decimal(offer.get("price_per_cluster_hour")) or per_machine * machines
        required = max(per_hour, MINIMUM_BALANCE)
        balance_data = client.billing_balance()
        balance = _decimal(balance_data.get("credits_balance")) or Decimal(0)
        if balance < required:
            problems.append(f"insufficient credits: starting needs {format_money(required)} "
                            f"(one hour of the whole cluster, at least $10), the balance is {format_money(balance)}")
        budget_left = next((_decimal(balance_data[k]) for k in BUDGET_FIELDS if balance_data.get(k) is not None), None)
        if budget_left is None:
            budget_check = "not exposed by the API; the server still enforces the environment's monthly budget"
        elif budget_left < per_hour:
            budget_check = f"{format_money(budget_left)} left this month"
            problems.append(f"the environment's monthly budget has {format_money(budget_left)} left, "
                            f"less than one hour of this cluster ({format_money(per_hour)})")
        else:
            budget_check = f"{format_money(budget_left)} left this month (~{budget_left / per_hour:.1f} h of this cluster)" \
                if per_hour else f"{format_money(budget_left)} left this month"

        result: dict[str, Any] = {
            "can_create": not problems,
            "plan": {
                **plan,
                "gpu": offer.get("gpu"), "gpus_per_machine": offer.get("gpus_per_machine"),
                "machine_kind": offer.get("machine_kind"), "location": offer.get("location"),
                "interconnect": offer.get("interconnect"), "community": bool(offer.get("community")),
                "price_per_machine_hour": str(per_machine), "price_per_hour": str(per_hour),
                "price_per_day": str((per_hour * 24).quantize(Decimal("0.01"))),
            },
            "balance": {"credits_balance": str(balance), "required_to_start": str(required),
                        "monthly_budget": budget_check},
            "problems": problems,
            "warnings": warnings,
            "summary": (f"{name}: {machines} x {offer.get('gpus_per_machine')}x {offer.get('gpu')} "
                        f"({offer.get('machine_kind')}, {offer.get('location')}), software {plan['software']}, "
                        f"{format_money(per_hour)}/h for the whole cluster ({format_money(per_machine)}/h per machine), "
                        "billed from the moment every machine has joined until deleted."),
        }
        if not problems:
            token, expires_at = signer.issue(plan, str(per_hour), environment)
            result["confirmation_token"] = token
            result["token_expires_at"] = datetime.fromtimestamp(expires_at, UTC).isoformat()
            result["next_step"] = ("Tell the user the price, then call create_cluster with the same offer_id, "
                                   "machines, software, name (and volume_id/ssh_key_ids) and this confirmation_token.")
        return result

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def create_cluster(
        offer_id: str, machines: int, name: str, confirmation_token: str, software: str = "none",
        volume_id: str | None = None, ssh_key_ids: list[str] | None = None,
    ) -> dict[str, Any]:
        """Create (and start paying for) a cluster that plan_cluster priced. Spends money.

        Needs the `confirmation_token` from plan_cluster, issued for exactly these arguments and not
        expired; otherwise it refuses and you must call plan_cluster again. Re-calling with the same
        token returns the same cluster instead of creating another. The cluster starts `provisioning`;
        poll cluster_status until `ready` (or `failed`/`degraded`). It is billed until delete_cluster.
        """
        request = {"offer_id": offer_id, "machines": machines, "software": software, "name": name,
                   "volume_id": volume_id, "ssh_key_ids": ssh_key_ids or []}
        payload = signer.verify(confirmation_token, request, environment)
        nonce = payload["nonce"]
        if nonce in signer.spent:
            cluster = client.get_cluster(signer.spent[nonce])
            return {"cluster": cluster, "note": "This token was already used; this is the cluster it created."}
        offer = next((o for o in offers(None, machines, True) if str(o.get("id")) == str(offer_id)), None)
        if offer is None:
            raise ToolError(f"offer {offer_id} can no longer start {machines} machines: call list_cluster_offers")
        current = _decimal(offer.get("price_per_cluster_hour"))
        planned = _decimal(payload["price_per_hour"])
        if current is not None and planned is not None and current > planned:
            raise ToolError(f"the price rose from {format_money(planned)}/h to {format_money(current)}/h since the plan: "
                            "call plan_cluster again and confirm the new price with the user")
        cluster = client.create_cluster(
            name=name, offer_id=offer_id, machines=machines, software=normalize("software", software),
            volume_id=volume_id, ssh_key_ids=ssh_key_ids or None, idempotency_key=nonce,
        )
        signer.spent[nonce] = str(cluster.get("id"))
        return {
            "cluster": cluster,
            "next_step": f"Poll cluster_status with cluster_id={cluster.get('id')} every ~15 s until status is "
                         "'ready' (or 'failed'/'degraded'). Billing starts when every machine has joined.",
        }

    @mcp.tool(annotations=read_only)
    @api_errors_as_tool_errors
    def cluster_status(cluster_id: str) -> dict[str, Any]:
        """Status of one cluster: its nodes (name, role, status, private_ip), price, billing start and
        its latest events. Statuses: provisioning -> installing -> ready; `failed` (never billed, machines
        released), `degraded` (software failed; still billed: delete_cluster, or ask the user to retry the
        install), `terminated`."""
        cluster = client.get_cluster(cluster_id)
        events = client.all_cluster_events(cluster_id)
        events.sort(key=lambda e: str(e.get("created_at") or ""))
        hints = {
            "provisioning": "Machines are booting and joining the private network; poll again in ~15 s.",
            "installing": "Software is installing on every node; poll again in ~15 s.",
            "ready": "Every node is ready. It is billed until delete_cluster.",
            "degraded": "The software failed to install; machines are up and billed. Retry the install "
                        "(CLI: runcrate clusters retry-install) or delete_cluster.",
            "failed": "Not every machine came up; all were released and nothing was billed.",
            "terminated": "Stopped; billing has ended.",
        }
        return {"cluster": cluster, "recent_events": events[-10:],
                "hint": hints.get(str(cluster.get("status")), "")}

    @mcp.tool(annotations=read_only)
    @api_errors_as_tool_errors
    def list_clusters() -> dict[str, Any]:
        """List the clusters in this environment (id, name, status, price_per_hour, machines). Use
        cluster_status for a cluster's nodes and events."""
        keep = ("id", "name", "status", "machines", "software", "price_per_hour", "billing_started_at",
                "termination_reason", "created_at")
        items = [{k: c.get(k) for k in keep if k in c} for c in client.all_clusters()]
        return {"clusters": items, "count": len(items)}

    @mcp.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True,
                                          open_world_hint=True))
    @api_errors_as_tool_errors
    def delete_cluster(cluster_id: str) -> dict[str, Any]:
        """Terminate a whole cluster: every machine stops, their local disks are lost, billing ends.
        Irreversible: only call it when the user asked to stop the cluster (or to stop spending).
        Single nodes cannot be terminated on their own."""
        result = client.delete_cluster(cluster_id)
        return {"cluster": result, "result": f"Cluster {cluster_id} is terminating; billing stops for every machine."}

    @mcp.tool(annotations=read_only)
    @api_errors_as_tool_errors
    def billing_balance() -> dict[str, Any]:
        """The workspace's credit balance, what its running clusters cost per hour, and the hours that
        balance lasts. When credits run out, running clusters are terminated."""
        return {"balance": client.billing_balance()}

    @mcp.tool(annotations=read_only)
    @api_errors_as_tool_errors
    def cluster_usage(month: str | None = None, cluster_id: str | None = None) -> dict[str, Any]:
        """What clusters cost in a month (`month` as YYYY-MM; default: this month): one line per cluster,
        "Cluster usage <name>" with its `amount`, and a row per machine (node, gpu, start, end, hours,
        rate, amount). Pass cluster_id to get one cluster's line only."""
        items = list(client.iterate("/billing/usage", {"month": month}))
        if cluster_id:
            items = [i for i in items if str(i.get("cluster_id")) == str(cluster_id)]
        total = sum((_decimal(i.get("amount")) or Decimal(0) for i in items), Decimal(0))
        return {"usage": items, "total": str(total), "month": month or "current"}

    return mcp


# -- HTTP transport: the same key, as a bearer token -------------------------------------------


class BearerKeyMiddleware:
    """ASGI middleware: every HTTP request must carry `Authorization: Bearer <api_key>`, else 401."""

    def __init__(self, app: Any, api_key: str) -> None:
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            supplied = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(supplied, self.expected):
                body = json.dumps({"error": {"code": "unauthenticated",
                                             "message": "Send the Runcrate API key as 'Authorization: Bearer rc_live_...'.",
                                             "details": {}}}).encode()
                await send({"type": "http.response.start", "status": 401,
                            "headers": [(b"content-type", b"application/json"),
                                        (b"www-authenticate", b'Bearer realm="runcrate"'),
                                        (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def http_app(config: ClientConfig, signer: PlanSigner | None = None) -> Any:
    if not config.api_key:
        raise ConfigError("the HTTP transport needs RUNCRATE_API_KEY: clients must present that same key")
    server = build_server(config, signer)
    return BearerKeyMiddleware(server.streamable_http_app(), config.api_key)


def serve(config: ClientConfig, http: bool = False, host: str = "127.0.0.1", port: int = 8765) -> None:
    if not config.api_key:
        raise ConfigError("no API key: set RUNCRATE_API_KEY or run `runcrate config set api_key rc_live_...`")
    if not http:
        build_server(config).run("stdio")
        return
    import uvicorn

    app = BearerKeyMiddleware(build_server(config).streamable_http_app(host=host), config.api_key)
    click.echo(f"Runcrate MCP server on http://{host}:{port}/mcp (send the API key as a bearer token)", err=True)
    uvicorn.run(app, host=host, port=port, log_level="warning")


@click.command()
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP on /mcp instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=int)
@click.option("--api-key", help="Default: $RUNCRATE_API_KEY or the config file.")
@click.option("--api-url", help="Default: $RUNCRATE_API_URL or the config file.")
@click.option("-e", "--environment", help="Default: $RUNCRATE_ENVIRONMENT or the config file.")
def run(use_http: bool, host: str, port: int, api_key: str | None, api_url: str | None, environment: str | None) -> None:
    """Run the Runcrate Clusters MCP server."""
    try:
        serve(ClientConfig.resolve(api_key, api_url, environment), http=use_http, host=host, port=port)
    except RuncrateError as error:
        raise click.ClickException(str(error)) from error


if __name__ == "__main__":
    run()
