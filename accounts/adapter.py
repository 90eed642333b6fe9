"""How django-allauth fits the product: where people land after signing in, and how its
emails (verification, password reset, security notices) are laid out and sent."""

from __future__ import annotations

import logging
from typing import Any

from allauth.account.adapter import DefaultAccountAdapter
from django.conf import settings
from django.contrib import messages
from django.http import HttpRequest
from django.urls import reverse

from accounts import signin_throttle
from accounts.invitations import invitation_from_token

log = logging.getLogger(__name__)

INVITATION_SESSION_KEY = "invitation_token"
# Where allauth's DefaultAccountAdapter.stash_verified_email keeps the address.
VERIFIED_EMAIL_SESSION_KEY = "account_verified_email"


class AccountAdapter(DefaultAccountAdapter):
    def get_login_redirect_url(self, request: HttpRequest) -> str:
        # Someone who opened an invitation, then signed up or in, goes back to accept it.
        token = request.session.get(INVITATION_SESSION_KEY)
        if token:
            return reverse("accounts:invitation", args=[token])
        return super().get_login_redirect_url(request)

    def get_signup_redirect_url(self, request: HttpRequest) -> str:
        return self.get_login_redirect_url(request)

    # Opening an invitation link stashes its address as verified (accounts.views.invitation), so
    # signing up with it needs no confirmation email. The stash counts only while the invitation
    # in the same session is still open: revoking, expiring or accepting it ends every stash it
    # made, in every browser that opened the link, without finding their sessions.
    def _open_invitation_email(self, request: HttpRequest) -> str | None:
        token = request.session.get(INVITATION_SESSION_KEY)
        invitation = invitation_from_token(token) if isinstance(token, str) else None
        if invitation is None or not invitation.is_open:
            return None
        return invitation.email.lower()

    def is_email_verified(self, request: HttpRequest, email: str) -> bool:
        invited = self._open_invitation_email(request)
        return invited is not None and invited == email.lower() and super().is_email_verified(request, email)

    def unstash_verified_email(self, request: HttpRequest) -> str | None:
        stashed = super().unstash_verified_email(request)
        if stashed and stashed.lower() == self._open_invitation_email(request):
            return stashed
        return None

    # Failed sign-ins back off per client and account (accounts.signin_throttle), in place of
    # allauth's per-account lock that anyone could trigger.
    def _signin_key(self, request: HttpRequest, credentials: dict[str, Any]) -> tuple[str, str]:
        login = str(credentials.get("email") or credentials.get("username") or "")
        return self.get_client_ip(request), login

    def pre_authenticate(self, request: HttpRequest, **credentials: Any) -> None:
        from django.core.exceptions import ValidationError

        wait = signin_throttle.wait_seconds(*self._signin_key(request, credentials))
        if wait:
            raise ValidationError(
                f"Too many failed sign-ins for this account from here. Try again in {wait} second{'' if wait == 1 else 's'}.",
                code="too_many_login_attempts",
            )
        super().pre_authenticate(request, **credentials)

    def authenticate(self, request: HttpRequest, **credentials: Any) -> Any:
        user = super().authenticate(request, **credentials)
        if user is not None:
            signin_throttle.record_success(*self._signin_key(request, credentials))
        return user

    def authentication_failed(self, request: HttpRequest, **credentials: Any) -> None:
        signin_throttle.record_failure(*self._signin_key(request, credentials))
        super().authentication_failed(request, **credentials)

    def send_mail(self, template_prefix: str, email: str, context: dict[str, Any]) -> None:
        """allauth's emails in the product's email layout (templates/account/email/*, extending
        emails/base.*), sent at once rather than through notifications.notify(): they carry
        one-time keys that must not be stored in a Notification row, and the person is waiting
        for them on the page."""
        context = {
            "dashboard_url": settings.SITE_URL + reverse("clusters:list"),
            "critical": True,
            **context,
        }
        link = context.get("activate_url") or context.get("password_reset_url")
        if settings.DEBUG and link:
            # `make run` writes emails to var/mail/; the console says which link to open.
            log.warning("Email to %s (%s): %s", email, template_prefix.rsplit("/", 1)[-1], link)
        try:
            super().send_mail(template_prefix, email, context)
        except OSError:  # SMTP down or refusing: the page says so instead of a server error
            log.exception("Could not send %s to %s", template_prefix, email)
            request = getattr(self, "request", None)
            if request is not None:
                messages.error(request, "We could not send the email just now. Try again in a few minutes.")
