"""runcrate gpu-types."""

from __future__ import annotations

import click

from runcrate_client.cli.base import (
    State,
    generic_table,
    json_option,
    main,
    pass_state,
    print_json,
    quiet_option,
)


@main.command("gpu-types")
@json_option
@quiet_option
@pass_state
def gpu_types(state: State, as_json: bool, quiet: bool) -> None:
    """List the GPU models clusters can be made of."""
    items = state.client().catalogue.list_gpu_types().items
    if as_json:
        return print_json(items)
    if quiet:
        for item in items:
            click.echo(item.get("name") or item.get("id"))
        return
    if not items:
        return click.echo("No GPU types.")
    click.echo(generic_table(items, preferred=("name", "id", "vendor", "memory_gb", "memory", "description")))
