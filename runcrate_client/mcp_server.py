"""The Runcrate Clusters MCP server: lets an agent find, price, create, follow and terminate clusters.

It acts in ONE environment (RUNCRATE_ENVIRONMENT, else the key's default) with ONE API key, through
the same JSON API as the CLI, so the API's rules (balance, budget, access) apply to the agent too.

Spending is gated twice: `create_cluster` only accepts a confirmation token that `plan_cluster`
issued for exactly the same offer, machine count, software, name and price, and that has not
expired. The token is HMAC-signed with a server-side secret (RUNCRATE_MCP_SECRET, else a random
per-process one), so an agent can neither forge one nor reuse it for a different cluster. A token
carries the ids of the workspace and environment the server planned in, and is checked against
the ones the server answers at create time: with a secret shared by several MCP servers, a token
planned in one workspace never creates in another. Its nonce doubles as the API's
Idempotency-Key, so calling `create_cluster` twice with the same token creates one cluster.

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
from typing import Any, TypeVar

import click
import pydantic
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from runcrate_client.api import (
    ApiError,
    ClientConfig,
    ConfigError,
    RuncrateError,
)
from runcrate_client.client import Client

DEFAULT_TOKEN_TTL = 600.0
TOKEN_PREFIX = "rcplan1"
PLAN_FIELDS = ("offer_id", "machines", "software", "image", "name", "volume_id", "ssh_key_ids")

F = TypeVar("F", bound=Callable[..., Any])


# -- confirmation tokens -----------------------------------------------------------------------


class PlanTokenError(Exception):
    """The token is missing, forged, expired, or was issued for a different cluster."""


def scope_of(answer: dict[str, Any]) -> dict[str, Any]:
    """Where the server acted: the workspace and environment ids of a plan or a cluster."""
    return {"workspace_id": answer.get("workspace_id"), "environment_id": answer.get("environment_id")}


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

    def issue(self, plan: dict[str, Any], price_per_hour: str, scope: dict[str, Any],
              fields: tuple[str, ...] = PLAN_FIELDS) -> tuple[str, float]:
        """A token for `plan` at `price_per_hour`, planned in `scope` (scope_of the server's answer)."""
        expires_at = self.clock() + self.ttl
        payload = {
            **{k: normalize(k, plan.get(k)) for k in fields},
            "price_per_hour": price_per_hour,
            "workspace_id": scope.get("workspace_id"),
            "environment_id": scope.get("environment_id"),
            "exp": round(expires_at, 3),
            "nonce": secrets.token_hex(12),
        }
        body = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
        return f"{TOKEN_PREFIX}.{body}.{self._sign(body)}", expires_at

    def offer(self, result: dict[str, Any], plan: dict[str, Any], price_per_hour: str, scope: dict[str, Any],
              next_step: str, fields: tuple[str, ...] = PLAN_FIELDS) -> None:
        """Add a plan tool's answer the token that confirms `plan`, its expiry and what to do next."""
        token, expires_at = self.issue(plan, price_per_hour, scope, fields=fields)
        result["confirmation_token"] = token
        result["token_expires_at"] = datetime.fromtimestamp(expires_at, UTC).isoformat()
        result["next_step"] = next_step

    def verify(self, token: str, request: dict[str, Any], scope: dict[str, Any],
               fields: tuple[str, ...] = PLAN_FIELDS) -> dict[str, Any]:
        """The token's payload, if it is genuine, unexpired, planned in `scope` (the workspace and
        environment ids the server answers now) and matches the request exactly."""
        try:
            prefix, body, signature = token.strip().split(".")
        except (ValueError, AttributeError):
            raise PlanTokenError("not a confirmation token: call plan_cluster and pass its confirmation_token") from None
        if prefix != TOKEN_PREFIX or not hmac.compare_digest(signature, self._sign(body)):
            raise PlanTokenError("invalid confirmation token (not issued by this server): call plan_cluster again")
        payload = json.loads(_unb64(body))
        if self.clock() > payload["exp"]:
            raise PlanTokenError("the confirmation token has expired: call plan_cluster again to re-check the price")
        if payload.get("workspace_id") is None or payload.get("workspace_id") != scope.get("workspace_id"):
            raise PlanTokenError("the confirmation token was issued in another workspace: call plan_cluster here")
        if payload.get("environment_id") is None or payload.get("environment_id") != scope.get("environment_id"):
            raise PlanTokenError("the confirmation token was issued for another environment: call plan_cluster here")
        mismatched = [
            f"{k} (planned {payload.get(k)!r}, asked {normalize(k, request.get(k))!r})"
            for k in fields
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
    if key == "image":
        # Not named is the offer's default: one spelling in the token.
        return str(value).strip() or None if value else None
    if key in ("volume_id", "offer_id"):
        # Ids arrive as numbers or strings (the API takes both): one spelling in the token.
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


READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=True)

# pydantic's error types in plain words, for arguments an agent got wrong.
ARGUMENT_PROBLEMS = {
    "missing": "is required",
    "int_type": "must be a whole number", "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "string_type": "must be text", "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "list_type": "must be a list", "float_type": "must be a number", "float_parsing": "must be a number",
}


def describe_arguments_error(tool: str, error: pydantic.ValidationError) -> str:
    """One line an agent can act on: each wrong argument and what it must be (ids: a number or a
    string of digits), without pydantic's wording, links or the values sent."""
    problems: dict[str, str] = {}
    for item in error.errors():
        name = str(item["loc"][0]) if item["loc"] else "arguments"
        kind = str(item["type"])
        if len(item["loc"]) > 1 and item["loc"][1] in ("int", "str"):
            problems[name] = "must be an id: a number or a string of digits"
        else:
            problems.setdefault(name, ARGUMENT_PROBLEMS.get(kind, "is not valid"))
    listed = "; ".join(f"{name} {problem}" for name, problem in problems.items())
    return f"{tool} was called with wrong arguments: {listed}. Call it again with them corrected."


class RuncrateMCPServer(MCPServer):
    """The MCP server, with a tool's wrong arguments reported in plain words (not pydantic's text)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, pydantic.ValidationError):
                raise ToolError(describe_arguments_error(name, error.__cause__)) from error.__cause__
            raise


@dataclass
class ToolContext:
    """What every tool module needs: the API client, the token signer and the environment."""

    client: Client
    signer: PlanSigner
    environment: str | None


def build_server(config: ClientConfig, signer: PlanSigner | None = None, client: Client | None = None) -> MCPServer:
    """The server with every tool module's tools (runcrate_client/mcp_tools/<group>.py)."""
    from runcrate_client.mcp_tools import TOOL_MODULES

    # httpx logs every request at INFO; on stdio that is noise on the agent host's stderr.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    tools = ToolContext(client=client or Client.from_config(config, program="mcp"),
                        signer=signer or PlanSigner.from_environment(), environment=config.environment)
    where = f"environment {config.environment!r}" if config.environment else "the API key's default environment"
    mcp = RuncrateMCPServer(
        name="runcrate-clusters",
        title="Runcrate Clusters",
        version="0.1.0",
        log_level="WARNING",
        instructions=(
            f"Runcrate Clusters: GPU clusters billed per machine-hour. You act in {where}; its monthly budget and "
            "the workspace balance cap what you can spend, and the server checks every rule. To start a cluster: "
            "list_cluster_offers (pick an offer for the GPU and machine count) -> plan_cluster (the server's "
            "price, balance, runway and refusals; returns a confirmation_token) -> tell the user the price -> "
            "create_cluster with the same arguments and the token -> cluster_status until 'ready'. SSH keys: "
            "list_ssh_keys / add_ssh_key; every key of the workspace is installed unless ssh_key_ids names some. Billing runs until delete_cluster. Money values "
            "are decimal strings in USD. Commands on the nodes never go through this server (the control plane runs "
            "no customer command): run them with the user's own SSH from a shell, `runcrate clusters exec NAME -- CMD` "
            "(every node in parallel, each line prefixed with its node; --json for per-node exit codes and output; "
            "--nodes node-1,node-3 for some), `runcrate clusters cp SRC NAME:[node-N:]PATH` for files and "
            "`runcrate clusters port-forward NAME [node-N] PORT` for a dashboard; or `ssh NAME-node-N` once "
            "`runcrate clusters ssh-config NAME` was run."
        ),
    )
    for module in TOOL_MODULES:
        module.register(mcp, tools)
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
    # Run the importable module, not this __main__ copy: the tool modules import
    # runcrate_client.mcp_server, and its exception classes must be the ones raised.
    from runcrate_client.mcp_server import run as run_server

    run_server()
