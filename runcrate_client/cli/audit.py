"""runcrate audit: the workspace's audit log (Owners and Managers)."""

from __future__ import annotations

import json

import click

from runcrate_client.cli.base import State, json_option, listed_for_scripts, main, pass_state, quiet_option
from runcrate_client.formatting import format_time, render_table


def _changes(entry: dict) -> str:
    changes = entry.get("changes") or {}
    return "; ".join(f"{field}: {json.dumps(pair[0])} → {json.dumps(pair[1])}" for field, pair in sorted(changes.items())
                     if isinstance(pair, list) and len(pair) == 2)


@main.command("audit")
@click.option("--actor", default=None, help="A username or an API key's prefix (rc_live_…).")
@click.option("--action", default=None, help="An action (cluster.terminate), or a kind of object (cluster) for all of its actions.")
@click.option("--object", "object_", default=None, help="A kind of object (cluster) or one object (cluster:12).")
@click.option("--since", default=None, help="From this date or time (ISO 8601; UTC unless it says otherwise).")
@click.option("--until", default=None, help="Before this date or time.")
@click.option("--limit", type=click.IntRange(1, 200), default=50, show_default=True, help="Entries per page.")
@click.option("--cursor", default=None, help="Continue from the cursor a previous page printed.")
@click.option("--all", "every", is_flag=True, help="Every matching entry, following the pages.")
@json_option
@quiet_option
@pass_state
def audit(state: State, actor: str | None, action: str | None, object_: str | None, since: str | None,
          until: str | None, limit: int, cursor: str | None, every: bool, as_json: bool, quiet: bool) -> None:
    """Who did what in the workspace, newest first: the actor (member, API key prefix, or Runcrate), the
    surface (page, api, cli, mcp), the object and what changed."""
    log = state.client().audit_log
    filters = {"actor": actor, "action": action, "object": object_, "since": since, "until": until}
    next_cursor = None
    if every:
        items = log.list_events_all(**filters)
    else:
        page = log.list_events(**filters, limit=limit, cursor=cursor)
        items, next_cursor = page.items, page.meta.get("next_cursor")
    if not listed_for_scripts(items, as_json=as_json, quiet=quiet, empty="No audit entries match."):
        rows = [[format_time(e.get("created_at")), e.get("actor"), e.get("surface"), e.get("action"),
                 f"{e.get('object_type')} {e.get('object_label') or e.get('object_id')}", _changes(e)] for e in items]
        click.echo(render_table(["TIME", "ACTOR", "SURFACE", "ACTION", "OBJECT", "CHANGES"], rows))
    if next_cursor and not as_json:
        click.echo(f"More: runcrate audit --cursor {next_cursor} (same filters)", err=True)
