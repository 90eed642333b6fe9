"""A person's own credentials, recorded in every workspace they belong to: sign-ins, refused
passwords, password changes and two-factor changes. allauth (and Django's auth) announce them
with signals; no service of ours makes these changes."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.db import transaction
from django.db.models import Q
from django.http import HttpRequest

from accounts.models import Membership
from audit.recording import record


def _record_for_user(user: Any, action: str, request: HttpRequest | None, **extra: Any) -> None:
    workspace_ids = list(Membership.objects.filter(user_id=user.pk).values_list("workspace_id", flat=True))
    with transaction.atomic():
        for workspace_id in workspace_ids:
            record(workspace_id, action, object_type="user", object_id=user.pk, label=user.get_username(),
                   request=request, **extra)


def signed_in(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    _record_for_user(user, "account.sign_in", request)


def sign_in_failed(sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **_: Any) -> None:
    """A refused password for an account that exists. An unknown login names no workspace, so
    it is not in any log (the sign-in throttle still counts it). Django has already taken the
    password out of `credentials`."""
    login = str(credentials.get("username") or credentials.get("email") or "").strip()
    if not login:
        return
    user = get_user_model().objects.filter(Q(username__iexact=login) | Q(email__iexact=login)).first()
    if user is not None:
        _record_for_user(user, "account.sign_in_failed", request)


def _mfa_changed(action: str) -> Any:
    def receiver(sender: Any, request: HttpRequest | None, user: Any, authenticator: Any = None, **_: Any) -> None:
        kind = getattr(authenticator, "type", "") or ""
        _record_for_user(user, action, request, after={"authenticator": kind} if kind else None)

    return receiver


def password_changed(sender: Any, request: HttpRequest | None, user: Any, **_: Any) -> None:
    _record_for_user(user, "account.password_change", request)


_receivers: list[Any] = []


def connect() -> None:
    from allauth.account import signals as account_signals
    from allauth.mfa import signals as mfa_signals

    user_logged_in.connect(signed_in, dispatch_uid="audit-signed-in")
    user_login_failed.connect(sign_in_failed, dispatch_uid="audit-sign-in-failed")
    account_signals.password_changed.connect(password_changed, dispatch_uid="audit-password-changed")
    account_signals.password_reset.connect(password_changed, dispatch_uid="audit-password-reset")
    for signal, action in ((mfa_signals.authenticator_added, "account.mfa_add"),
                           (mfa_signals.authenticator_removed, "account.mfa_remove"),
                           (mfa_signals.authenticator_reset, "account.mfa_reset")):
        receiver = _mfa_changed(action)
        _receivers.append(receiver)  # signals keep weak references
        signal.connect(receiver, dispatch_uid=f"audit-{action}")
