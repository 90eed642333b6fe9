"""Print a new API key for a user, for operators and scripts: the only time the key is shown."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.models import Membership
from api.keys import create_api_key


class Command(BaseCommand):
    help = "Create an API key acting for USERNAME in one of their workspaces and print it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--workspace", type=int, help="Workspace id (default: the user's first workspace).")
        parser.add_argument("--name", default="created by manage.py", help="A name to tell the key apart.")

    def handle(self, *args: Any, username: str, workspace: int | None, name: str, **options: Any) -> None:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user {username!r}.")
        memberships = Membership.objects.filter(user=user).select_related("workspace")
        if workspace is not None:
            memberships = memberships.filter(workspace_id=workspace)
        membership = memberships.first()
        if membership is None:
            where = f"workspace {workspace}" if workspace is not None else "any workspace"
            raise CommandError(f"{username} is not a member of {where}.")
        api_key, raw = create_api_key(workspace=membership.workspace, created_by=user, name=name)
        self.stderr.write(f"Key {api_key.prefix}… for {username} in workspace {membership.workspace.name!r} "
                          f"(id {membership.workspace_id}), role {membership.get_role_display()}. Shown once:")
        self.stdout.write(raw)
