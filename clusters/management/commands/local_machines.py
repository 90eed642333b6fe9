"""Print the one line that says how this computer runs the `local` provider's machines (real
nodes through this computer's host runtime, or loopback sandboxes, and why): the stack prints
it as the stack's user sees it."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Say how this computer runs the local provider's machines, as this user."

    def handle(self, *args: Any, **options: Any) -> None:
        from clusters.providers.local.provider import describe_mode

        self.stdout.write(describe_mode())
