"""runcrate webhooks: signed lifecycle events sent to your own endpoints (Owners and Managers)."""

from __future__ import annotations

import click

from runcrate_client.cli.base import (
    RuncrateGroup,
    State,
    json_option,
    listed_for_scripts,
    main,
    pass_state,
    print_json,
    quiet_option,
)
from runcrate_client.formatting import format_time, render_table


@main.group(cls=RuncrateGroup)
def webhooks() -> None:
    """Webhooks: signed JSON events (Runcrate-Signature: t=…,v1=HMAC-SHA256) POSTed to your endpoints."""


@webhooks.command("list")
@json_option
@quiet_option
@pass_state
def webhooks_list(state: State, as_json: bool, quiet: bool) -> None:
    """The workspace's endpoints."""
    items = state.client().webhooks.list_endpoints_all()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet,
                          empty="No webhook endpoints. Add one with: runcrate webhooks add URL --event cluster.ready"):
        return
    rows = [[e.get("id"), e.get("url"), ",".join(e.get("events") or []), "on" if e.get("is_active") else "off"]
            for e in items]
    click.echo(render_table(["ID", "URL", "EVENTS", "ACTIVE"], rows))


@webhooks.command("add")
@click.argument("url")
@click.option("--event", "events", multiple=True, required=True,
              help="An event to send, e.g. cluster.ready (repeat for more). The server knows the list: a "
                   "wrong name is refused with every event it offers.")
@click.option("--description", default="", help="What receives it.")
@json_option
@pass_state
def webhooks_add(state: State, url: str, events: tuple[str, ...], description: str, as_json: bool) -> None:
    """Add an endpoint; prints its signing secret (also shown by `webhooks show`)."""
    endpoint = state.client().webhooks.create_endpoint(url=url, events=list(events), description=description)
    if as_json:
        return print_json(endpoint)
    click.echo(f"Added webhook {endpoint.get('id')} → {endpoint.get('url')}")
    click.echo(f"Signing secret: {endpoint.get('secret')}")


@webhooks.command("show")
@click.argument("endpoint_id")
@json_option
@pass_state
def webhooks_show(state: State, endpoint_id: str, as_json: bool) -> None:
    """One endpoint with its signing secret."""
    endpoint = state.client().webhooks.get_endpoint(endpoint_id)
    if as_json:
        return print_json(endpoint)
    for key in ("id", "url", "description", "events", "is_active", "secret", "created_at"):
        value = endpoint.get(key)
        click.echo(f"{key}: {','.join(value) if isinstance(value, list) else value}")


@webhooks.command("update")
@click.argument("endpoint_id")
@click.option("--event", "events", multiple=True, help="Subscribe to these events instead (repeat the option).")
@click.option("--active/--inactive", "is_active", default=None, help="Send deliveries to it, or pause it.")
@json_option
@pass_state
def webhooks_update(state: State, endpoint_id: str, events: tuple[str, ...], is_active: bool | None,
                    as_json: bool) -> None:
    """Change an endpoint's events, or pause and resume it."""
    endpoint = state.client().webhooks.update_endpoint(endpoint_id, events=list(events) or None, is_active=is_active)
    if as_json:
        return print_json(endpoint)
    click.echo(f"Saved webhook endpoint {endpoint.get('id')}: {','.join(endpoint.get('events') or [])}"
               f"{'' if endpoint.get('is_active') else ' (paused)'}.")


@webhooks.command("rotate-secret")
@click.argument("endpoint_id")
@json_option
@pass_state
def webhooks_rotate_secret(state: State, endpoint_id: str, as_json: bool) -> None:
    """Make a new signing secret: deliveries are signed with it from now on."""
    endpoint = state.client().webhooks.rotate_secret(endpoint_id)
    if as_json:
        return print_json(endpoint)
    click.echo(f"New signing secret for endpoint {endpoint.get('id')}: {endpoint.get('secret')}")


@webhooks.command("remove")
@click.argument("endpoint_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def webhooks_remove(state: State, endpoint_id: str, yes: bool) -> None:
    """Remove an endpoint and its delivery log."""
    if not yes:
        click.confirm(f"Remove webhook endpoint {endpoint_id}?", abort=True)
    state.client().webhooks.delete_endpoint(endpoint_id)
    click.echo(f"Removed webhook endpoint {endpoint_id}.")


@webhooks.command("test")
@click.argument("endpoint_id")
@json_option
@pass_state
def webhooks_test(state: State, endpoint_id: str, as_json: bool) -> None:
    """Send a webhook.test event to the endpoint."""
    delivery = state.client().webhooks.test_endpoint(endpoint_id)
    if as_json:
        return print_json(delivery)
    click.echo(f"Test event {delivery.get('event_id')} queued (delivery {delivery.get('id')}). "
               f"See it with: runcrate webhooks deliveries {endpoint_id}")


@webhooks.command("deliveries")
@click.argument("endpoint_id")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 200))
@json_option
@pass_state
def webhooks_deliveries(state: State, endpoint_id: str, limit: int, as_json: bool) -> None:
    """The endpoint's delivery log, newest first."""
    items = state.client().webhooks.list_deliveries(endpoint_id, limit=limit).items
    if as_json:
        return print_json(items)
    if not items:
        return click.echo(f"No deliveries yet. Try: runcrate webhooks test {endpoint_id}")
    rows = [[d.get("id"), d.get("event_type"), d.get("event_id"), d.get("status"), d.get("attempts"),
             d.get("last_status_code") or d.get("last_error") or "-",
             "-" if d.get("last_response_ms") is None else f"{d.get('last_response_ms')} ms",
             format_time(d.get("next_attempt_at")) if d.get("status") == "pending" else "-"] for d in items]
    click.echo(render_table(["ID", "EVENT", "EVENT ID", "STATUS", "TRIES", "LAST ANSWER", "TIME", "NEXT TRY"], rows))


@webhooks.command("resend")
@click.argument("endpoint_id")
@click.argument("delivery_id")
@json_option
@pass_state
def webhooks_resend(state: State, endpoint_id: str, delivery_id: str, as_json: bool) -> None:
    """Send a delivery's event again (same event id)."""
    delivery = state.client().webhooks.resend_delivery(endpoint_id, delivery_id)
    if as_json:
        return print_json(delivery)
    click.echo(f"Re-sending {delivery.get('event_type')} {delivery.get('event_id')} (delivery {delivery.get('id')}).")
