"""runcrate config: the settings file."""

from __future__ import annotations

import click

from runcrate_client.api import (
    CONFIG_KEYS,
    config_path,
    read_config_file,
    write_config_value,
)
from runcrate_client.cli.base import (
    RuncrateGroup,
    State,
    json_option,
    main,
    pass_state,
    print_json,
)
from runcrate_client.formatting import (
    mask_key,
    render_table,
)


@main.group(cls=RuncrateGroup)
def config() -> None:
    """Read and write ~/.runcrate/config.yaml (or $RUNCRATE_CONFIG)."""


@config.command("set")
@click.argument("key", type=click.Choice([*CONFIG_KEYS, *(k.replace("_", "-") for k in CONFIG_KEYS)]))
@click.argument("value")
def config_set(key: str, value: str) -> None:
    """Save a setting: api_key, api_url or environment."""
    path = write_config_value(key, value)
    shown = mask_key(value) if key.replace("-", "_") == "api_key" else value
    click.echo(f"Saved {key.replace('-', '_')} = {shown} in {path}")


@config.command("unset")
@click.argument("key", type=click.Choice(list(CONFIG_KEYS)))
def config_unset(key: str) -> None:
    """Remove a setting from the config file."""
    path = write_config_value(key, None)
    click.echo(f"Removed {key} from {path}")


@config.command("show")
@json_option
@pass_state
def config_show(state: State, as_json: bool) -> None:
    """Show the settings in effect and where each one comes from."""
    resolved = state.config()
    values = {"api_key": mask_key(resolved.api_key) if resolved.api_key else None,
              "api_url": resolved.api_url, "environment": resolved.environment, "workspace": resolved.workspace}
    if as_json:
        print_json({"config_file": str(config_path()), "values": values, "sources": resolved.sources})
        return
    path = config_path()
    click.echo(f"Config file: {path}{'' if path.exists() else ' (not created yet)'}")
    rows = [(key, values[key] or "-", resolved.sources.get(key, "default")) for key in CONFIG_KEYS]
    click.echo(render_table(["SETTING", "VALUE", "FROM"], rows))
    if not read_config_file(path) and not resolved.api_key:
        click.echo("\nNo API key yet: make one on the Keys page, then `runcrate config set api_key rc_live_...`.")
