"""The `runcrate` command line: clusters, offers, billing and quotes over the JSON API.

Tables for people, `--json` for scripts (the API's `data`, unchanged), `-q` for ids only. Every API
error ends the command with one line on stderr and an exit code per kind of error:

    0 ok · 1 other (server error, unreachable, rate limited) · 2 usage / bad input (400)
    3 authentication or permission (401, 403, no key) · 4 payment (402) · 5 not found (404)
    6 conflict (409) · 7 `clusters watch`: the cluster ended failed, degraded or terminated
    8 `clusters network-test --watch`: slow pairs found · 9 the network test could not run
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, NoReturn

import click

from runcrate_client.api import (
    ApiError,
    ClientConfig,
    ConfigError,
    Record,
    RuncrateError,
)
from runcrate_client.client import Client
from runcrate_client.formatting import (
    render_table,
)

EXIT_OK = 0
EXIT_OTHER = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_PAYMENT = 4
EXIT_NOT_FOUND = 5
EXIT_CONFLICT = 6
EXIT_CLUSTER_FAILED = 7
EXIT_NETWORK_SLOW = 8
EXIT_NETWORK_FAILED = 9

SOFTWARE_CHOICES = ("none", "slurm", "kubernetes", "ray")
READY = "ready"
FAILED_STATES = frozenset({"failed", "degraded", "terminated"})


def exit_code_for(error: BaseException) -> int:
    if isinstance(error, ApiError):
        return {
            400: EXIT_USAGE,
            401: EXIT_AUTH,
            403: EXIT_AUTH,
            402: EXIT_PAYMENT,
            404: EXIT_NOT_FOUND,
            409: EXIT_CONFLICT,
        }.get(error.status, EXIT_OTHER)
    if isinstance(error, ConfigError):
        return EXIT_AUTH
    return EXIT_OTHER


def error_line(error: BaseException) -> str:
    if isinstance(error, ApiError):
        code = f" {error.code}" if error.code else ""
        return f"Error ({error.status}{code}): {error}"
    return f"Error: {error}"


class RuncrateGroup(click.Group):
    """A group with command aliases (`ls`, `rm`) that turns client errors into one line and an exit code."""

    aliases: ClassVar[dict[str, str]] = {}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.aliases.get(cmd_name, cmd_name))

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        return (command.name if command else name), command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except RuncrateError as error:
            click.echo(error_line(error), err=True)
            ctx.exit(exit_code_for(error))


class ClustersGroup(RuncrateGroup):
    aliases: ClassVar[dict[str, str]] = {"ls": "list", "rm": "delete", "terminate": "delete",
                                         "add-worker": "add-workers"}


# -- shared plumbing ---------------------------------------------------------------------------


class State:
    def __init__(self, api_key: str | None, api_url: str | None, environment: str | None, timeout: float,
                 workspace: str | None = None) -> None:
        self.overrides = {"api_key": api_key, "api_url": api_url, "environment": environment, "workspace": workspace}
        self.timeout = timeout
        self._client: Client | None = None

    def config(self) -> ClientConfig:
        return ClientConfig.resolve(
            api_key=self.overrides["api_key"], api_url=self.overrides["api_url"],
            environment=self.overrides["environment"], workspace=self.overrides["workspace"],
        )

    def client(self) -> Client:
        if self._client is None:
            self._client = Client.from_config(self.config(), timeout=self.timeout, program="cli")
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()


pass_state = click.make_pass_decorator(State)


def json_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print the API's data as JSON (for scripts).")(fn)


def quiet_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("-q", "--quiet", is_flag=True, help="Print ids only, one a line.")(fn)


def print_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


# -- root --------------------------------------------------------------------------------------


@click.group(cls=RuncrateGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--api-key", help="API key (rc_live_…). Default: $RUNCRATE_API_KEY or the config file.")
@click.option("--api-url", help="API base URL. Default: $RUNCRATE_API_URL, the config file, http://127.0.0.1:8000.")
@click.option("-e", "--environment", help="Environment name or id (X-Environment). Default: $RUNCRATE_ENVIRONMENT.")
@click.option("-w", "--workspace", help="The workspace you expect the key to act in, by name or id (X-Workspace): "
              "a key acts only in the workspace it was made in, and another is refused. Default: $RUNCRATE_WORKSPACE.")
@click.option("--timeout", default=30.0, show_default=True, help="Seconds to wait for each API answer.")
@click.version_option("0.1.0", prog_name="runcrate")
@click.pass_context
def main(ctx: click.Context, api_key: str | None, api_url: str | None, environment: str | None, workspace: str | None,
         timeout: float) -> None:
    """Runcrate Clusters: GPU clusters from the command line.

    \b
    Exit codes: 0 ok, 1 other error, 2 usage/bad input, 3 auth, 4 payment,
    5 not found, 6 conflict, 7 watched cluster failed/degraded/terminated,
    8 network test found slow pairs, 9 network test could not run.
    """
    state = State(api_key, api_url, environment, timeout, workspace)
    ctx.obj = state
    ctx.call_on_close(state.close)


def listed_for_scripts(items: list[Record], *, as_json: bool, quiet: bool, empty: str) -> bool:
    """Print a list as JSON, as ids, or the message for no items; False when a table is wanted."""
    if as_json:
        print_json(items)
    elif quiet:
        for item in items:
            click.echo(item.get("id"))
    elif not items:
        click.echo(empty)
    else:
        return False
    return True


def generic_table(items: list[Record], preferred: Iterable[str] = ()) -> str:
    """A table of the scalar fields of records whose exact shape the contract does not pin down."""
    keys: list[str] = [k for k in preferred if any(k in item for item in items)]
    for item in items:
        for key, value in item.items():
            if key not in keys and not isinstance(value, (dict, list)):
                keys.append(key)
    rows = [[item.get(k) for k in keys] for item in items]
    return render_table([k.upper().replace("_", " ") for k in keys], rows)
