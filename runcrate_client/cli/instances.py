"""runcrate instances: every machine the workspace runs, each a node of a cluster."""

from __future__ import annotations

import click

from runcrate_client.cli.base import RuncrateGroup, State, json_option, listed_for_scripts, main, pass_state
from runcrate_client.formatting import format_money, render_table


@main.group(cls=RuncrateGroup)
def instances() -> None:
    """Machines the workspace runs; each ends with its cluster."""


@instances.command("list")
@json_option
@click.option("-q", "--quiet", is_flag=True, help="Print ids only, one a line.")
@pass_state
def instances_list(state: State, as_json: bool, quiet: bool) -> None:
    """Every machine in every environment, with the cluster it belongs to."""
    items = state.client().instances.list_all()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet, empty="No instances: no cluster is running."):
        return
    rows = [[i.get("id"), f"{i.get('cluster_name')} ({i.get('cluster_id')})", i.get("name"), i.get("role"),
             i.get("status"), i.get("health") or "-", f"{i.get('gpus_per_machine')}x {i.get('gpu')}",
             i.get("environment"), i.get("private_ip") or "-", format_money(i.get("price_per_hour")) + "/h"]
            for i in items]
    click.echo(render_table(["ID", "CLUSTER", "NODE", "ROLE", "STATUS", "HEALTH", "GPU", "ENVIRONMENT", "PRIVATE IP",
                             "PRICE"], rows, right={9}))


@instances.command("terminate")
@click.argument("instance_id")
@pass_state
def instances_terminate(state: State, instance_id: str) -> None:
    """Ask to stop one machine. The API refuses (exit 6) and names the cluster to terminate instead."""
    state.client().instances.terminate(instance_id)
    click.echo(f"Instance {instance_id} is terminating.")
