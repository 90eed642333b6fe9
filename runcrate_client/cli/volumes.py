"""runcrate volumes."""

from __future__ import annotations

import time

import click

from runcrate_client.cli.base import (
    EXIT_CONFLICT,
    EXIT_NOT_FOUND,
    EXIT_OTHER,
    RuncrateGroup,
    State,
    fail,
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
    """Volumes: data kept between clusters, synced into /shared/volume on node-0, saved back at terminate
    and whenever you ask (`runcrate volumes sync`)."""


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


@volumes.command("sync")
@click.argument("volume")
@click.option("--cluster", "cluster_name", help="The running cluster to save from, when several hold the volume.")
@click.option("--no-wait", is_flag=True, help="Return once the save is asked for, without waiting for it.")
@click.option("--timeout", default=3600.0, show_default=True, help="Seconds to wait for the save.")
@pass_state
def volumes_sync(state: State, volume: str, cluster_name: str | None, no_wait: bool, timeout: float) -> None:
    """Save the head's volume folder to VOLUME now (name or id), while the cluster runs: a checkpoint.
    The cluster's /shared/volume on node-0 (/volume on container offers) is copied in; a folder larger
    than the volume is refused whole and the volume keeps its earlier data. The cluster's events say
    how many bytes and how long."""
    client = state.client()
    found = next((v for v in client.volumes.list_all() if volume in (str(v.get("id")), v.get("name"))), None)
    if found is None:
        fail(f"No volume named {volume!r} in this environment.", EXIT_NOT_FOUND)
    if cluster_name:
        cluster_id = client.find_cluster_id(cluster_name)
    else:
        holding = [c for c in client.clusters.list_all()
                   if c.get("volume_id") == found.get("id") and c.get("status") in ("ready", "degraded")]
        if not holding:
            fail(f"Volume {found.get('name')} is not attached to a running cluster: a stopped cluster saved it "
                 "when it stopped.", EXIT_CONFLICT)
        if len(holding) > 1:
            fail(f"Volume {found.get('name')} is attached to {', '.join(str(c.get('name')) for c in holding)}: "
                 "name one with --cluster.")
        cluster_id = str(holding[0]["id"])
    seen = {str(e.get("id")) for e in client.clusters.list_events_all(cluster_id)}
    client.clusters.sync_volume(cluster_id)
    click.echo(f"Saving the head's volume folder to volume {found.get('name')}.")
    if no_wait:
        click.echo(f"It ends with a volume_synced event: runcrate clusters events {cluster_id}")
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in client.clusters.list_events_all(cluster_id):
            if str(event.get("id")) in seen:
                continue
            seen.add(str(event.get("id")))
            if event.get("event") == "volume_synced":
                click.echo(str(event.get("message")))
                return
            if event.get("event") == "volume_sync_failed":
                fail(str(event.get("message")), EXIT_OTHER)
        time.sleep(1.0)
    fail(f"Still saving after {timeout:g}s; see runcrate clusters events {cluster_id}.", EXIT_OTHER)
