"""Invitation links and the invitation email's context.

A link carries `signing.dumps(invitation id)`: unforgeable without SECRET_KEY, so nothing
secret is stored on the row or in the Notification that emails it. Whether a link still
works is the row's business (pending, not expired)."""

from __future__ import annotations

from django.conf import settings
from django.core import signing
from django.urls import reverse

from accounts.models import Invitation

SALT = "accounts.invitation"


def invitation_token(invitation: Invitation) -> str:
    return signing.dumps(invitation.pk, salt=SALT)


def invitation_from_token(token: str) -> Invitation | None:
    try:
        pk = signing.loads(token, salt=SALT)
    except signing.BadSignature:
        return None
    return Invitation.objects.select_related("workspace", "invited_by").filter(pk=pk).first()


def invitation_url(invitation: Invitation) -> str:
    return settings.SITE_URL + reverse("accounts:invitation", args=[invitation_token(invitation)])


def invitation_context(stored: dict) -> dict:
    invitation = Invitation.objects.select_related("workspace", "invited_by").get(pk=stored["invitation_id"])
    inviter = invitation.invited_by
    return {
        "invitation": invitation,
        "workspace_name": invitation.workspace.name,
        "inviter": (inviter.email or inviter.get_username()) if inviter else "A teammate",
        "role": invitation.get_role_display(),
        "accept_url": invitation_url(invitation),
        "expires_at": invitation.expires_at,
    }
