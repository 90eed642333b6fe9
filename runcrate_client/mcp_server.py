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

import hmac
import json
import logging
from typing import Any

import click
import pydantic
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from runcrate_client.api import ClientConfig, ConfigError, RuncrateError
from runcrate_client.client import Client
from runcrate_client.mcp_common import PlanSigner, ToolContext
from runcrate_client.mcp_tools import TOOL_MODULES

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


def build_server(config: ClientConfig, signer: PlanSigner | None = None, client: Client | None = None) -> MCPServer:
    """The server with every tool module's tools (runcrate_client/mcp_tools/<group>.py)."""
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
