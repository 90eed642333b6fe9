"""runcrate mcp: the agent server."""

from __future__ import annotations

import click

from runcrate_client.cli.base import (
    State,
    main,
    pass_state,
)


@main.command("mcp")
@click.option("--http", "use_http", is_flag=True, help="Serve streamable HTTP instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8765, show_default=True, type=int)
@pass_state
def mcp_command(state: State, use_http: bool, host: str, port: int) -> None:
    """Run the MCP server for agents, acting in one environment with this key."""
    from runcrate_client.mcp_server import serve

    serve(state.config(), http=use_http, host=host, port=port)
