"""runcrate billing: balance and usage."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from runcrate_client.api import (
    Record,
)
from runcrate_client.cli.base import (
    RuncrateGroup,
    State,
    fail,
    json_option,
    main,
    pass_state,
    print_json,
)
from runcrate_client.formatting import (
    cell,
    format_hours,
    format_money,
    format_time,
    render_pairs,
    render_table,
)


@main.group(cls=RuncrateGroup)
def billing() -> None:
    """Credits, burn rate and usage per cluster."""


@billing.command("balance")
@json_option
@pass_state
def billing_balance(state: State, as_json: bool) -> None:
    """Credits left, what running clusters cost per hour, and how long that lasts."""
    data = state.client().billing.get_balance()
    if as_json:
        return print_json(data)
    hours = data.get("hours_remaining")
    pairs: list[tuple[str, Any]] = [
        ("Credits", format_money(data.get("credits_balance"))),
        ("Running clusters cost", format_money(data.get("active_usage_cost_per_hour")) + "/h"),
        ("Hours remaining", format_hours(hours) if hours is not None else "- (nothing running)"),
    ]
    for key in ("monthly_budget", "budget_remaining", "monthly_budget_remaining"):
        if data.get(key) is not None:
            pairs.append((key.replace("_", " ").capitalize(), format_money(data[key])))
    click.echo(render_pairs(pairs))


def _check_month(month: str | None) -> None:
    if month:
        try:
            datetime.strptime(month, "%Y-%m")
        except ValueError:
            fail(f"--month must look like 2025-01, not {month!r}")


@billing.command("usage")
@click.option("--month", help="YYYY-MM (default: this month).")
@click.option("--rows", is_flag=True, help="Also show every line's machines (one row per machine).")
@json_option
@pass_state
def billing_usage(state: State, month: str | None, rows: bool, as_json: bool) -> None:
    """One line per cluster ("Cluster usage <name>"): machines, status and amount. With --rows,
    each line's machines under it; `runcrate billing usage-line CLUSTER` opens one line."""
    _check_month(month)
    usage = state.client().usage(month, rows=rows)
    items, total = usage.items, usage.meta.get("total_amount")
    if as_json:
        return print_json(items)
    if not items:
        return click.echo(f"No usage{' in ' + month if month else ' this month'}.")
    click.echo(usage_table(items, total) if rows else lines_table(items, total))


@billing.command("usage-line")
@click.argument("cluster")
@click.option("--month", help="YYYY-MM (default: this month).")
@json_option
@pass_state
def billing_usage_line(state: State, cluster: str, month: str | None, as_json: bool) -> None:
    """One cluster's usage line (by name or id) with a row per machine under it."""
    _check_month(month)
    client = state.client()
    item = client.billing.get_usage_line(client.find_cluster_id(cluster), month=month)
    if as_json:
        return print_json(item)
    click.echo(usage_table([item], item.get("amount")))


def lines_table(items: list[Record], total: Any) -> str:
    """A line per cluster: its description, machine count, whether it still accrues, amount."""
    rows: list[list[Any]] = [
        [item.get("description") or f"Cluster usage {item.get('cluster_id')}", item.get("cluster_id"),
         item.get("machines"), "accruing" if item.get("accruing") else "completed", format_money(item.get("amount"))]
        for item in items
    ]
    rows.append(["Total", "", "", "", format_money(total)])
    return render_table(["DESCRIPTION", "CLUSTER", "MACHINES", "STATUS", "AMOUNT"], rows, right={2, 4})


def usage_table(items: list[Record], total: Any) -> str:
    """Cluster lines flush left, their machine rows indented under them, every column aligned."""
    rows: list[list[Any]] = []
    for item in items:
        rows.append([item.get("description") or f"Cluster usage {item.get('cluster_id')}", "", "", "", "", "",
                     format_money(item.get("amount"))])
        for row in item.get("rows") or []:
            rows.append([
                "    " + cell(row.get("node")), row.get("gpu"), format_time(row.get("start")),
                format_time(row.get("end")) if row.get("end") else "running",
                format_hours(row.get("hours")), format_money(row.get("rate")) + "/h", format_money(row.get("amount")),
            ])
    rows.append(["Total", "", "", "", "", "", format_money(total)])
    return render_table(["DESCRIPTION", "GPU", "START", "END", "HOURS", "RATE", "AMOUNT"], rows, right={4, 5, 6})
