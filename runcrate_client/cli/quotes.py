"""runcrate quote."""

from __future__ import annotations

from typing import Any

import click

from runcrate_client.cli.base import (
    State,
    json_option,
    main,
    pass_state,
    print_json,
)


@main.command("quote")
@click.option("--contact-name", required=True)
@click.option("--email", required=True)
@click.option("--company")
@click.option("--gpu", required=True, help="GPU model, e.g. H100.")
@click.option("--machines", required=True, type=int, help="How many machines.")
@click.option("--network", help="Interconnect wanted, e.g. infiniband, roce, ethernet.")
@click.option("--term", help="e.g. reserved or on_demand.")
@click.option("--term-months", type=int)
@click.option("--start-date", help="YYYY-MM-DD.")
@click.option("--notes")
@json_option
@pass_state
def quote(state: State, as_json: bool, **fields: Any) -> None:
    """Request a quote: reserved capacity, very large clusters, InfiniBand/RoCE."""
    result = state.client().quotes.create(**fields)
    if as_json:
        return print_json(result)
    ident = f" {result.get('id')}" if isinstance(result, dict) and result.get("id") else ""
    click.echo(f"Quote request{ident} sent; we will answer at {fields['email']}.")
