"""Single sign-on: each workspace's OpenID Connect provider, through allauth's `openid_connect`
provider (docs/accounts.md, "Single sign-on").

A workspace's provider is allauth's app `workspace-<id>`, built from its SingleSignOn row when
allauth asks for it (the secret is unsealed only then). What a provider may do is narrower than
allauth's defaults, because any Owner can point their workspace at a provider they run:

- it signs in the accounts linked to it (linked by the person, signed in, on the Single
  sign-on page, with an address the provider vouches for that their account has verified),
- and it creates an account only for an address with an open invitation to its workspace,
  that no account has yet: that first sign-in joins the workspace with the invited role.

It never signs anyone in by an email address alone. A session remembers which workspaces'
providers signed it in (allauth's authentication records); where a workspace requires single
sign-on, every member but an Owner needs that record to act in it (SingleSignOnMiddleware).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from allauth.account.authentication import get_authentication_records
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialApp, SocialLogin
from django.contrib.auth import get_user_model
from django.db.models import Q
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from accounts.http import HtmxHttpRequest, page_redirect
from accounts.models import Invitation, Membership, Role, SingleSignOn
from accounts.tenancy import ENVIRONMENT_SESSION_KEY, WORKSPACE_SESSION_KEY

PROVIDER_PREFIX = "workspace-"


def workspace_id_of(provider_id: str) -> int | None:
    """The workspace whose provider `provider_id` is (allauth's provider id `workspace-<id>`)."""
    if not provider_id.startswith(PROVIDER_PREFIX):
        return None
    number = provider_id.removeprefix(PROVIDER_PREFIX)
    return int(number) if number.isascii() and number.isdigit() and len(number) <= 18 else None


def social_app(sso: SingleSignOn) -> SocialApp:
    """allauth's app for a workspace's provider, never saved: the row is the only copy."""
    return SocialApp(
        provider="openid_connect", provider_id=sso.provider_id, name=sso.workspace.name,
        client_id=sso.client_id, secret=sso.secret,
        settings={"server_url": sso.issuer, "oauth_pkce_enabled": True},
    )


def login_url(workspace_id: int) -> str:
    return reverse("openid_connect_login", kwargs={"provider_id": f"{PROVIDER_PREFIX}{workspace_id}"})


def callback_url(workspace_id: int) -> str:
    return reverse("openid_connect_callback", kwargs={"provider_id": f"{PROVIDER_PREFIX}{workspace_id}"})


def allow_forms_to(response: HttpResponse, *providers: SingleSignOn) -> HttpResponse:
    """Let the page's forms post to allauth's provider view, which answers with a redirect to the
    provider's authorization endpoint: the Content-Security-Policy's form-action covers the
    redirects after a form is sent, so that origin is added for this response only."""
    origins = sorted({_origin(sso.authorization_endpoint or sso.issuer) for sso in providers})
    if origins:
        response._csp_update = {"form-action": origins}  # type: ignore[attr-defined]
    return response


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def signed_in_through(request: HttpRequest, workspace_id: int) -> bool:
    """Whether this session was signed in (or confirmed) by the workspace's provider."""
    provider_id = f"{PROVIDER_PREFIX}{workspace_id}"
    return any(
        record.get("method") == "socialaccount" and record.get("provider") == provider_id
        for record in get_authentication_records(request, request.user)
    )


def must_sign_in_through(request: HttpRequest, membership: Membership) -> bool:
    """The member may not act in the workspace until its provider signs them in: it requires
    single sign-on, they are not an Owner (Owners keep their password and two-factor as the
    way back in when the provider fails), and this session has no sign-in through it."""
    if membership.role == Role.OWNER:
        return False
    try:
        sso = membership.workspace.single_sign_on  # fetched with the membership (accounts.tenancy)
    except SingleSignOn.DoesNotExist:
        return False
    return sso.required and not signed_in_through(request, membership.workspace_id)


def _vouched_email(sociallogin: SocialLogin) -> str | None:
    """The address the provider vouches for (`email` with `email_verified` true), lower-cased."""
    for address in sociallogin.email_addresses:
        if address.verified and address.email:
            return address.email.lower()
    return None


def open_invitation(workspace_id: int, email: str) -> Invitation | None:
    return Invitation.objects.filter(
        workspace_id=workspace_id, email__iexact=email, status=Invitation.Status.PENDING,
        expires_at__gt=timezone.now(),
    ).first()


def _account_exists(email: str) -> bool:
    from allauth.account.models import EmailAddress

    return (
        get_user_model().objects.filter(email__iexact=email).exists()
        or EmailAddress.objects.filter(email__iexact=email).exists()
    )


def _refuse(request: HttpRequest, workspace_id: int, message: str) -> ImmediateHttpResponse:
    sso = SingleSignOn.objects.select_related("workspace").filter(workspace_id=workspace_id).first()
    name = sso.workspace.name if sso is not None else "this workspace"
    return ImmediateHttpResponse(
        render(request, "accounts/sso_refused.html", {"workspace_name": name, "message": message}, status=403)
    )


def _record_sign_in(request: HttpRequest, sociallogin: SocialLogin) -> None:
    from allauth.socialaccount.internal.flows.login import record_authentication

    record_authentication(request, sociallogin)


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def list_apps(self, request: HttpRequest, provider: str | None = None, client_id: str | None = None) -> list[SocialApp]:
        """allauth's apps, and a workspace's provider when asked for it by its provider id.
        Workspaces' providers are never listed all together (as on a sign-in page): which
        workspaces use which provider is theirs to tell."""
        apps = super().list_apps(request, provider=provider, client_id=client_id)
        workspace_id = workspace_id_of(provider or "")
        if workspace_id is None:
            return apps
        rows = SingleSignOn.objects.select_related("workspace").filter(workspace_id=workspace_id)
        if client_id:
            rows = rows.filter(client_id=client_id)
        return apps + [social_app(sso) for sso in rows]

    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        workspace_id = workspace_id_of(sociallogin.account.provider)
        if workspace_id is None:
            return
        email = _vouched_email(sociallogin)
        if sociallogin.state.get("process") == "connect":
            self._check_connect(request, sociallogin, workspace_id, email)
        elif not sociallogin.is_existing:
            self._check_first_sign_in(request, workspace_id, email)

    def _check_connect(self, request: HttpRequest, sociallogin: SocialLogin, workspace_id: int,
                       email: str | None) -> None:
        """A signed-in person links the provider to their account (or confirms a link)."""
        from accounts.services import verified_emails

        user = request.user
        if not user.is_authenticated:
            return  # allauth refuses a connect without a signed-in user
        if sociallogin.is_existing:
            if sociallogin.user == user:
                _record_sign_in(request, sociallogin)  # the provider just vouched for this person again
            return
        if email is None or email not in verified_emails(user):
            raise _refuse(request, workspace_id, (
                f"The identity provider signed you in as {email or 'an address it does not vouch for'}, "
                "which is not a verified address of your account. Sign in to the provider as yourself, "
                "or add and verify that address under Email addresses first."
            ))

    def _check_first_sign_in(self, request: HttpRequest, workspace_id: int, email: str | None) -> None:
        """Someone the provider knows and no account is linked to: an account is made only for
        an invited address that has none yet."""
        if email is None:
            raise _refuse(request, workspace_id, "The identity provider did not vouch for an email address, so we cannot tell who you are.")
        if _account_exists(email):
            raise _refuse(request, workspace_id, (
                f"An account with {email} exists already. Sign in with its password, then connect "
                "single sign-on on the Single sign-on page; after that the provider signs you in."
            ))
        if open_invitation(workspace_id, email) is None:
            raise _refuse(request, workspace_id, (
                f"{email} has no open invitation to this workspace. Ask one of its Owners or Managers to invite it."
            ))

    def get_connect_redirect_url(self, request: HttpRequest, socialaccount: Any) -> str:
        return reverse("accounts:sso")


def linked(sender: Any, request: HttpRequest, sociallogin: SocialLogin, **_: Any) -> None:
    """Linking the provider to an account proves the person at the provider is its owner now."""
    if workspace_id_of(sociallogin.account.provider) is not None:
        _record_sign_in(request, sociallogin)


def signed_in(sender: Any, request: HttpRequest, response: HttpResponse, user: Any,
              sociallogin: SocialLogin | None = None, **_: Any) -> None:
    """After a workspace's provider signs someone in: act in that workspace, joining it first
    when this is the first sign-in of an address invited to it."""
    from accounts.adapter import INVITATION_SESSION_KEY
    from accounts.services import accept_invitation

    workspace_id = workspace_id_of(sociallogin.account.provider) if sociallogin is not None else None
    if workspace_id is None:
        return
    if not Membership.objects.filter(workspace_id=workspace_id, user=user).exists():
        invitation = open_invitation(workspace_id, user.email or "")
        if invitation is None:
            return
        accept_invitation(user=user, invitation=invitation)
        # The invitation page it would go back to says the link is spent: go to the dashboard.
        request.session.pop(INVITATION_SESSION_KEY, None)
        if isinstance(response, HttpResponseRedirect):
            response["Location"] = reverse("clusters:list")
    request.session[WORKSPACE_SESSION_KEY] = workspace_id
    request.session.pop(ENVIRONMENT_SESSION_KEY, None)


_receivers: list[Callable[..., None]] = []


def connect() -> None:
    from allauth.account import signals as account_signals
    from allauth.socialaccount import signals as social_signals

    social_signals.social_account_added.connect(linked, dispatch_uid="sso-linked")
    account_signals.user_logged_in.connect(signed_in, dispatch_uid="sso-signed-in")


# Where a member who must sign in through the provider may still go: the page that says so and
# starts it, allauth's provider views, signing out, and their other workspaces.
EXEMPT_PREFIXES = ("/account/sso/", "/sso/", "/logout/", "/login/", "/account/workspace/switch/",
                   "/account/workspaces/", "/reauthenticate/", "/static/", "/api/", "/favicon.ico")


class SingleSignOnMiddleware:
    """Sends a member who must sign in through their workspace's provider to the page that
    does it (after CurrentWorkspaceMiddleware, which finds the workspace)."""

    def __init__(self, get_response: Callable[[HtmxHttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HtmxHttpRequest) -> HttpResponse:
        tenancy = getattr(request, "tenancy", None)
        if (tenancy is not None and not request.path.startswith(EXEMPT_PREFIXES)
                and must_sign_in_through(request, tenancy.membership)):
            return page_redirect(request, "accounts:sso")
        return self.get_response(request)


def providers_for_address(email: str) -> list[SingleSignOn]:
    """The providers of the workspaces an address belongs to or is invited to (the sign-in
    page's "Single sign-on": the address tells which provider to go to)."""
    email = email.strip()
    members = Q(workspace__memberships__user__email__iexact=email) | Q(
        workspace__memberships__user__emailaddress__email__iexact=email, workspace__memberships__user__emailaddress__verified=True
    )
    invited = Q(workspace__invitations__email__iexact=email, workspace__invitations__status=Invitation.Status.PENDING,
                workspace__invitations__expires_at__gt=timezone.now())
    return list(SingleSignOn.objects.filter(members | invited).select_related("workspace").distinct().order_by("workspace__name"))
