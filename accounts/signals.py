"""What accounts tells the apps above it, which it does not import (docs/architecture.md,
"Apps and their layers"). Sent inside the service's transaction; receivers are connected in
their app's AppConfig.ready and queue anything that must wait for the commit themselves."""

from __future__ import annotations

from django.dispatch import Signal

# A membership is ending (removed, or the member left): keyword arguments `workspace_id` and
# `user_id`. What the member held through it ends with it: their API keys here (api) and
# their open pages' pushes (clusters).
membership_ended = Signal()

# An invitation was made: keyword argument `invitation`. Its email goes out (notifications).
invitation_created = Signal()
