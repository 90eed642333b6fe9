"""What notifications sends when an app below it says something happened (accounts.signals);
connected in NotificationsConfig.ready."""

from __future__ import annotations

from accounts.models import Invitation
from notifications import services
from notifications.kinds import Kind


def email_invitation(*, invitation: Invitation, **_: object) -> None:
    """accounts.signals.invitation_created: the invitation's link, to the invited address."""
    services.notify(
        Kind.INVITATION, recipients=[invitation.email], context={"invitation_id": invitation.pk},
        dedupe_key=f"invitation:{invitation.pk}", workspace_id=invitation.workspace_id,
    )
