"""runcrate members, invitations, api-keys: who is in the workspace and what acts for them."""

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

ROLES = click.Choice(["owner", "manager", "developer"], case_sensitive=False)


@main.group(cls=RuncrateGroup)
def members() -> None:
    """Members of the workspace and their roles (Owners change roles; Owners and Managers remove)."""


@members.command("list")
@json_option
@quiet_option
@pass_state
def members_list(state: State, as_json: bool, quiet: bool) -> None:
    """Members with their role; `*` marks you."""
    items = state.client().members.list_all()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet, empty="No members."):
        return
    rows = [["*" if m.get("you") else "", m.get("id"), m.get("username"), m.get("email"), m.get("role"),
             format_time(m.get("joined_at"))] for m in items]
    click.echo(render_table(["", "ID", "USERNAME", "EMAIL", "ROLE", "JOINED"], rows))


@members.command("set-role")
@click.argument("member_id")
@click.argument("role", type=ROLES)
@json_option
@pass_state
def members_set_role(state: State, member_id: str, role: str, as_json: bool) -> None:
    """Give member MEMBER_ID (see `members list`) a ROLE: owner, manager or developer."""
    member = state.client().members.change_role(member_id, role=role.lower())
    if as_json:
        return print_json(member)
    click.echo(f"{member.get('username')} is now {member.get('role')}.")


@members.command("remove")
@click.argument("member_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def members_remove(state: State, member_id: str, yes: bool) -> None:
    """Remove a member: the invitations they sent close and their API keys here stop for good."""
    if not yes:
        click.confirm(f"Remove member {member_id} from the workspace?", abort=True)
    member = state.client().members.remove(member_id)
    click.echo(f"Removed {member.get('username')}.")


@main.group(cls=RuncrateGroup)
def invitations() -> None:
    """Invitations into the workspace (Owners and Managers)."""


@invitations.command("list")
@json_option
@quiet_option
@pass_state
def invitations_list(state: State, as_json: bool, quiet: bool) -> None:
    """Pending invitations."""
    items = state.client().members.list_invitations_all()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet,
                          empty="No pending invitations. Invite with: runcrate invitations create EMAIL --role developer"):
        return
    rows = [[i.get("id"), i.get("email"), i.get("role"), i.get("invited_by"), format_time(i.get("expires_at"))]
            for i in items]
    click.echo(render_table(["ID", "EMAIL", "ROLE", "INVITED BY", "EXPIRES"], rows))


@invitations.command("create")
@click.argument("email")
@click.option("--role", type=ROLES, default="developer", show_default=True)
@json_option
@pass_state
def invitations_create(state: State, email: str, role: str, as_json: bool) -> None:
    """Invite EMAIL with a role; we email them a link."""
    invitation = state.client().members.create_invitation(email=email, role=role.lower())
    if as_json:
        return print_json(invitation)
    click.echo(f"Invited {invitation.get('email')} as {invitation.get('role')} (invitation {invitation.get('id')}): "
               "we emailed them a link.")


@invitations.command("revoke")
@click.argument("invitation_id")
@pass_state
def invitations_revoke(state: State, invitation_id: str) -> None:
    """Revoke a pending invitation: its link stops working."""
    invitation = state.client().members.revoke_invitation(invitation_id)
    click.echo(f"Revoked the invitation of {invitation.get('email')}; its link no longer works.")


@main.group("api-keys", cls=RuncrateGroup)
def api_keys() -> None:
    """API keys of the workspace: each acts here only, with its creator's role."""


@api_keys.command("list")
@json_option
@quiet_option
@pass_state
def api_keys_list(state: State, as_json: bool, quiet: bool) -> None:
    """Every key of the workspace (the whole key is shown only when it is made)."""
    items = state.client().api_keys.list_all()
    if listed_for_scripts(items, as_json=as_json, quiet=quiet, empty="No API keys."):
        return
    rows = [[k.get("id"), k.get("name"), f"{k.get('prefix')}…",
             "revoked" if k.get("revoked") else ("active" if k.get("is_active") else "deactivated"),
             k.get("created_by"), format_time(k.get("last_used_at")) if k.get("last_used_at") else "never"]
            for k in items]
    click.echo(render_table(["ID", "NAME", "KEY", "STATE", "MADE BY", "LAST USED"], rows))


@api_keys.command("create")
@click.argument("name")
@json_option
@pass_state
def api_keys_create(state: State, name: str, as_json: bool) -> None:
    """Make a key named NAME; it is printed once, here, and stored nowhere."""
    key = state.client().api_keys.create(name=name)
    if as_json:
        return print_json(key)
    click.echo(f"Made API key {key.get('name')} (id {key.get('id')}). Copy it now, it is not shown again:")
    click.echo(key.get("key"))


def _set_active(state: State, key_id: str, active: bool) -> None:
    key = state.client().api_keys.update(key_id, is_active=active)
    click.echo(f"{'Reactivated' if active else 'Deactivated'} {key.get('name')} ({key.get('prefix')}…).")


@api_keys.command("deactivate")
@click.argument("key_id")
@pass_state
def api_keys_deactivate(state: State, key_id: str) -> None:
    """Refuse a key until it is reactivated."""
    _set_active(state, key_id, False)


@api_keys.command("reactivate")
@click.argument("key_id")
@pass_state
def api_keys_reactivate(state: State, key_id: str) -> None:
    """Accept a deactivated key again."""
    _set_active(state, key_id, True)


@api_keys.command("delete")
@click.argument("key_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@pass_state
def api_keys_delete(state: State, key_id: str, yes: bool) -> None:
    """Delete a key: anything using it is refused from now on."""
    if not yes:
        click.confirm(f"Delete API key {key_id}?", abort=True)
    key = state.client().api_keys.delete(key_id)
    click.echo(f"Deleted {key.get('name')} ({key.get('prefix')}…). Anything using it is now refused.")
