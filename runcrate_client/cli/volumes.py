"""runcrate volumes."""

from __future__ import annotations

import click

from runcrate_client.cli.base import (
    RuncrateGroup,
    State,
    generic_table,
    json_option,
    listed_for_scripts,
    main,
    pass_state,
    print_json,
    quiet_option,
)


@main.group(cls=RuncrateGroup)
def volumes() -> None:
    """Volumes: data kept between clusters, synced into /shared/volume on node-0."""


@volumes.command("list")
@json_option
@quiet_option
@pass_state
def volumes_list(state: State, as_json: bool, quiet: bool) -> None:
    """The environment's volumes."""
    items = state.client().volumes.list_all()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet,
                          empty="No volumes. Create one with: runcrate volumes create NAME --size-gb 500"):
        return
    click.echo(generic_table(items, preferred=("id", "name", "size_gb", "environment", "created_at")))


@volumes.command("create")
@click.argument("name")
@click.option("--size-gb", type=click.IntRange(1, 100_000), required=True, help="Size in GB.")
@json_option
@pass_state
def volumes_create(state: State, name: str, size_gb: int, as_json: bool) -> None:
    """Create a volume; attach it with `clusters create --volume ID`."""
    volume = state.client().volumes.create(name=name, size_gb=size_gb)
    if as_json:
        return print_json(volume)
    click.echo(f"Created volume {volume.get('name')} (id {volume.get('id')}, {volume.get('size_gb')} GB).")


@volumes.command("delete")
@click.argument("volume_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def volumes_delete(state: State, volume_id: str, yes: bool) -> None:
    """Delete a volume and its data (refused while a live cluster uses it)."""
    if not yes:
        click.confirm(f"Delete volume {volume_id} and its data?", abort=True)
    state.client().volumes.delete(volume_id)
    click.echo(f"Deleted volume {volume_id}.")
