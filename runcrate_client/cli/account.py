"""runcrate ssh-keys, environments, workspaces: what a workspace holds besides clusters."""

from __future__ import annotations

from pathlib import Path

import click

from runcrate_client.api import ApiError, Record
from runcrate_client.cli.base import (
    RuncrateGroup,
    State,
    generic_table,
    json_option,
    listed_for_scripts,
    main,
    pass_state,
    print_json,
)
from runcrate_client.formatting import format_money, render_table


@main.group("ssh-keys", cls=RuncrateGroup)
def ssh_keys() -> None:
    """SSH public keys of the workspace; pass their ids to `clusters create --ssh-key`."""


@ssh_keys.command("list")
@json_option
@click.option("-q", "--quiet", is_flag=True, help="Print ids only, one a line.")
@pass_state
def ssh_keys_list(state: State, as_json: bool, quiet: bool) -> None:
    """The workspace's SSH keys."""
    items = state.client().account.list_ssh_keys_all()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet,
                          empty="No SSH keys. Add one with: runcrate ssh-keys add NAME ~/.ssh/id_ed25519.pub"):
        return
    click.echo(generic_table([{k: v for k, v in i.items() if k != "public_key"} for i in items],
                             preferred=("id", "name", "fingerprint", "created_at")))


@ssh_keys.command("add")
@click.argument("name")
@click.argument("public_key_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@json_option
@pass_state
def ssh_keys_add(state: State, name: str, public_key_file: Path, as_json: bool) -> None:
    """Add the public key in PUBLIC_KEY_FILE (e.g. ~/.ssh/id_ed25519.pub) under NAME."""
    key = state.client().account.create_ssh_key(name=name, public_key=public_key_file.read_text().strip())
    if as_json:
        return print_json(key)
    click.echo(f"Added SSH key {key.get('name')} (id {key.get('id')}, {key.get('fingerprint')}).")


@ssh_keys.command("delete")
@click.argument("key_id")
@pass_state
def ssh_keys_delete(state: State, key_id: str) -> None:
    """Remove a key: running clusters keep it, new clusters no longer get it."""
    state.client().account.delete_ssh_key(key_id)
    click.echo(f"Deleted SSH key {key_id}.")


@main.group("environments", cls=RuncrateGroup, invoke_without_command=True)
@json_option
@click.pass_context
def environments(ctx: click.Context, as_json: bool) -> None:
    """Environments of the workspace with their monthly budgets and spend; `-e NAME` acts in one."""
    if ctx.invoked_subcommand is not None:
        return
    items = ctx.ensure_object(State).client().account.list_environments_all()
    if as_json:
        return print_json(items)
    _print_environments(items)


def _print_environments(items: list[Record]) -> None:
    rows = [["*" if e.get("current") else "", e.get("id"), e.get("name"), "yes" if e.get("is_default") else "",
             format_money(e.get("monthly_budget")), format_money(e.get("month_to_date_spend")),
             format_money(e.get("budget_remaining"))] for e in items]
    click.echo(render_table(["", "ID", "NAME", "DEFAULT", "BUDGET", "SPENT THIS MONTH", "LEFT"], rows, right={4, 5, 6}))


@environments.command("create")
@click.argument("name")
@click.option("--budget", "monthly_budget", default="1000", show_default=True, help="Monthly budget in USD.")
@json_option
@pass_state
def environments_create(state: State, name: str, monthly_budget: str, as_json: bool) -> None:
    """Create an environment (Owners and Managers)."""
    environment = state.client().account.create_environment(name=name, monthly_budget=monthly_budget)
    if as_json:
        return print_json(environment)
    click.echo(f"Created environment {environment.get('name')} with a budget of "
               f"{format_money(environment.get('monthly_budget'))} a month.")


def _environment_id(state: State, name_or_id: str) -> str:
    for environment in state.client().account.list_environments_all():
        if name_or_id in (environment.get("name"), str(environment.get("id"))):
            return str(environment["id"])
    raise ApiError(404, "not_found", f"No environment {name_or_id!r} in this workspace.")


@environments.command("set-budget")
@click.argument("environment")
@click.argument("amount")
@json_option
@pass_state
def environments_set_budget(state: State, environment: str, amount: str, as_json: bool) -> None:
    """Set ENVIRONMENT's monthly budget to AMOUNT dollars: its clusters stop when the month's spend reaches it."""
    updated = state.client().account.update_environment(_environment_id(state, environment), monthly_budget=amount)
    if as_json:
        return print_json(updated)
    click.echo(f"Budget of {updated.get('name')} set to {format_money(updated.get('monthly_budget'))}.")


@environments.command("set-idle-notice")
@click.argument("environment")
@click.argument("hours", type=click.FloatRange(0, 168))
@pass_state
def environments_set_idle_notice(state: State, environment: str, hours: float) -> None:
    """Tell a cluster's owner after HOURS idle hours (0.5: half an hour; 0: never)."""
    updated = state.client().account.update_environment(_environment_id(state, environment), idle_notice_hours=hours)
    hours = float(updated.get("idle_notice_hours") or 0)
    click.echo(f"{updated.get('name')}: idle clusters are noticed after {hours:g} h." if hours
               else f"{updated.get('name')}: no idle notices.")


@main.command("workspaces")
@json_option
@pass_state
def workspaces(state: State, as_json: bool) -> None:
    """Workspaces you belong to, with your role; `-w NAME` acts in another one."""
    items = state.client().account.list_workspaces_all()
    if as_json:
        return print_json(items)
    rows = [["*" if w.get("current") else "", w.get("id"), w.get("name"), w.get("role")] for w in items]
    click.echo(render_table(["", "ID", "NAME", "ROLE"], rows))


@main.group("quotas", cls=RuncrateGroup, invoke_without_command=True)
@json_option
@click.pass_context
def quotas(ctx: click.Context, as_json: bool) -> None:
    """Quotas: the most GPUs running at once and the most spend a month, per member, role or everyone."""
    if ctx.invoked_subcommand is not None:
        return
    items = ctx.ensure_object(State).client().account.list_quotas_all()
    if listed_for_scripts(items, as_json=as_json, quiet=False, empty="No quotas."):
        return
    rows = [[q.get("id"), q.get("applies_to"), q.get("environment") or "every environment",
             q.get("max_gpus") if q.get("max_gpus") is not None else "no limit",
             format_money(q.get("monthly_spend")) if q.get("monthly_spend") is not None else "no limit",
             "; ".join(f"{u.get('who')}: {u.get('gpus_running')} GPUs, {format_money(u.get('spent_this_month'))}"
                       for u in q.get("in_use") or [])] for q in items]
    click.echo(render_table(["ID", "APPLIES TO", "WHERE", "MOST GPUS", "MOST SPEND/MONTH", "IN USE"], rows))


@quotas.command("set")
@click.option("--member", "member_id", help="One member's id (see `members list`).")
@click.option("--role", type=click.Choice(["owner", "manager", "developer"], case_sensitive=False),
              help="Each member with this role, on their own.")
@click.option("--environment", "environment", help="One environment (name or id); every environment if left out.")
@click.option("--max-gpus", type=int, help="Most GPUs running at once.")
@click.option("--monthly-spend", help="Most spend a calendar month, in USD.")
@json_option
@pass_state
def quotas_set(state: State, member_id: str | None, role: str | None, environment: str | None,
               max_gpus: int | None, monthly_spend: str | None, as_json: bool) -> None:
    """Set a quota (Owners): for --member, each member with --role, or everyone together (neither)."""
    quota = state.client().account.set_quota(
        member_id=member_id, role=role.lower() if role else None,
        environment_id=_environment_id(state, environment) if environment else None,
        max_gpus=max_gpus, monthly_spend=monthly_spend,
    )
    if as_json:
        return print_json(quota)
    click.echo(f"Quota {quota.get('id')} of {quota.get('applies_to')} in "
               f"{quota.get('environment') or 'every environment'} set.")


@quotas.command("delete")
@click.argument("quota_id")
@pass_state
def quotas_delete(state: State, quota_id: str) -> None:
    """Remove a quota (Owners)."""
    quota = state.client().account.delete_quota(quota_id)
    click.echo(f"Removed the quota of {quota.get('applies_to')}.")
