from __future__ import annotations

from typing import Any

from allauth.account.adapter import get_adapter
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import QuerySet
from django.http import Http404, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from accounts import services, sso
from accounts.adapter import INVITATION_SESSION_KEY, VERIFIED_EMAIL_SESSION_KEY
from accounts.forms import (
    BudgetForm,
    EnvironmentForm,
    IdleNoticeForm,
    InviteForm,
    RoleForm,
    SingleSignOnAddressForm,
    SingleSignOnForm,
    SSHKeyForm,
    WorkspaceNameForm,
    apply_errors,
)
from accounts.http import AuthenticatedHttpRequest, HtmxHttpRequest
from accounts.invitations import invitation_from_token, invitation_token
from accounts.models import Environment, Invitation, Membership, SingleSignOn, SSHKey
from accounts.tenancy import ENVIRONMENT_SESSION_KEY, WORKSPACE_SESSION_KEY, require_tenancy
from config.money import format_money


def _next_url(request: AuthenticatedHttpRequest, default: str = "clusters:list") -> HttpResponseRedirect:
    """Back to the page the switcher was on: a path on this site, nothing else. (redirect()
    would take a bare word for a view name to reverse, and fail on one that is not.)"""
    target = request.POST.get("next", "")
    local = target.startswith("/") and not target.startswith(("//", "/\\"))
    if local and url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return HttpResponseRedirect(target)
    return redirect(default)


def _posted_id(request: AuthenticatedHttpRequest, name: str) -> int:
    """A switcher's posted id; anything but a whole number a bigint holds is an object that
    does not exist."""
    value = request.POST.get(name, "")
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise Http404(f"No such {name}.")
    return int(value)


@login_required
@require_POST
def switch_workspace(request: AuthenticatedHttpRequest) -> HttpResponse:
    membership = get_object_or_404(Membership, user=request.user, workspace_id=_posted_id(request, "workspace"))
    request.session[WORKSPACE_SESSION_KEY] = membership.workspace_id
    request.session.pop(ENVIRONMENT_SESSION_KEY, None)
    return redirect("clusters:list")


@login_required
@require_POST
def switch_environment(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    environment = get_object_or_404(Environment, workspace=tenancy.workspace, pk=_posted_id(request, "environment"))
    request.session[ENVIRONMENT_SESSION_KEY] = environment.pk
    return _next_url(request)


@login_required
def members(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    form = InviteForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            invitation = services.invite_member(by=tenancy.membership, **form.cleaned_data)
        except PermissionDenied as exc:
            raise Http404(str(exc)) from None
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Invited {invitation.email} as {invitation.get_role_display()}: we emailed them a link.")
            return redirect("accounts:members")
    memberships = tenancy.workspace.memberships.select_related("user").order_by("role", "user__username")
    invitations: QuerySet[Invitation] | list[Invitation] = []
    if tenancy.membership.can_manage_members:
        invitations = Invitation.objects.filter(
            workspace=tenancy.workspace, status=Invitation.Status.PENDING, expires_at__gt=timezone.now(),
        ).select_related("invited_by")
    return render(request, "accounts/members.html", {
        "form": form, "memberships": memberships, "invitations": invitations,
        "invitation_days": settings.INVITATION_MAX_AGE_DAYS,
    })


@login_required
@require_POST
def invitation_revoke(request: AuthenticatedHttpRequest, invitation_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    invitation = get_object_or_404(Invitation, pk=invitation_id, workspace=tenancy.workspace)
    try:
        services.revoke_invitation(by=tenancy.membership, invitation=invitation)
        messages.success(request, f"Revoked the invitation of {invitation.email}; its link no longer works.")
    except PermissionDenied as exc:
        raise Http404(str(exc)) from None
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("accounts:members")


def invitation(request: HtmxHttpRequest, token: str) -> HttpResponse:
    """The emailed link. Anonymous: sign up (the address is taken as verified, since the link
    reached it) or sign in, then come back here. Signed in as the invited address: accept."""
    invitation = invitation_from_token(token)
    if invitation is None:
        raise Http404("This invitation link is not valid.")
    context: dict[str, Any] = {"invitation": invitation, "token": token}
    workspace_sso = SingleSignOn.objects.filter(workspace_id=invitation.workspace_id).first()
    if workspace_sso is not None:
        context["sso_login_url"] = sso.login_url(invitation.workspace_id)
    if not invitation.is_open:
        request.session.pop(INVITATION_SESSION_KEY, None)
        request.session.pop(VERIFIED_EMAIL_SESSION_KEY, None)
        return render(request, "accounts/invitation.html", {**context, "state": "closed"}, status=410)
    if not request.user.is_authenticated:
        request.session[INVITATION_SESSION_KEY] = token
        get_adapter(request).stash_verified_email(request, invitation.email)
        response = render(request, "accounts/invitation.html", {**context, "state": "anonymous"})
        return sso.allow_forms_to(response, workspace_sso) if workspace_sso is not None else response
    if invitation.email.lower() not in services.verified_emails(request.user):
        return render(request, "accounts/invitation.html", {**context, "state": "someone_else"}, status=403)
    if request.method == "POST":
        try:
            membership = services.accept_invitation(user=request.user, invitation=invitation)
        except (PermissionDenied, ValidationError) as exc:
            messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
            return redirect("accounts:invitation", token=token)
        request.session.pop(INVITATION_SESSION_KEY, None)
        request.session[WORKSPACE_SESSION_KEY] = membership.workspace_id
        request.session.pop(ENVIRONMENT_SESSION_KEY, None)
        messages.success(request, f"You joined {invitation.workspace.name} as {membership.get_role_display()}.")
        return redirect("clusters:list")
    return render(request, "accounts/invitation.html", {**context, "state": "ready"})


def _open_invitations_for(user: User) -> QuerySet[Invitation]:
    return Invitation.objects.filter(
        email__in=services.verified_emails(user), status=Invitation.Status.PENDING, expires_at__gt=timezone.now(),
    ).exclude(workspace__memberships__user=user).select_related("workspace")


def _create_workspace(request: AuthenticatedHttpRequest, form: WorkspaceNameForm) -> HttpResponse | None:
    """The create form's POST: a new workspace with the user as Owner, and switch to it."""
    try:
        workspace = services.create_workspace(name=form.cleaned_data["name"], owner=request.user)
    except ValidationError as exc:
        apply_errors(form, exc)
        return None
    request.session[WORKSPACE_SESSION_KEY] = workspace.pk
    request.session.pop(ENVIRONMENT_SESSION_KEY, None)
    messages.success(request, f"Created {workspace.name}. You are its Owner.")
    return redirect("clusters:list")


@login_required
def welcome(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Where a person with no workspace always lands: name one, or accept an invitation."""
    if request.tenancy is not None and request.method == "GET":
        return redirect("clusters:list")
    form = WorkspaceNameForm(request.POST or None, prefix="create")
    if request.method == "POST" and form.is_valid() and (response := _create_workspace(request, form)):
        return response
    invitations = [(i, invitation_token(i)) for i in _open_invitations_for(request.user)]
    return render(request, "accounts/welcome.html", {"create_form": form, "invitations": invitations})


@login_required
def workspaces(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The user's account: workspaces (switch, create, rename, leave), password and two-factor."""
    tenancy = require_tenancy(request)
    posted = request.POST if request.method == "POST" else None
    create_form = WorkspaceNameForm(posted if posted and "create-name" in posted else None, prefix="create")
    rename_form = WorkspaceNameForm(
        posted if posted and "rename-name" in posted else None, prefix="rename", initial={"name": tenancy.workspace.name},
    )
    if create_form.is_bound and create_form.is_valid() and (response := _create_workspace(request, create_form)):
        return response
    if rename_form.is_bound and rename_form.is_valid():
        try:
            services.rename_workspace(by=tenancy.membership, name=rename_form.cleaned_data["name"])
        except PermissionDenied as exc:
            raise Http404(str(exc)) from None
        except ValidationError as exc:
            apply_errors(rename_form, exc)
        else:
            messages.success(request, f"Renamed the workspace to {rename_form.cleaned_data['name'].strip()}.")
            return redirect("accounts:workspaces")
    invitations = [(i, invitation_token(i)) for i in _open_invitations_for(request.user)]
    return render(request, "accounts/workspaces.html", {
        "create_form": create_form, "rename_form": rename_form, "invitations": invitations,
        "memberships": Membership.objects.filter(user=request.user).select_related("workspace"),
    })


@login_required
@require_POST
def workspace_leave(request: AuthenticatedHttpRequest, workspace_id: int) -> HttpResponse:
    membership = get_object_or_404(Membership, user=request.user, workspace_id=workspace_id)
    try:
        services.leave_workspace(membership=membership)
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
        return redirect("accounts:workspaces")
    if request.session.get(WORKSPACE_SESSION_KEY) == workspace_id:
        request.session.pop(WORKSPACE_SESSION_KEY, None)
        request.session.pop(ENVIRONMENT_SESSION_KEY, None)
    messages.success(request, f"You left {membership.workspace.name}.")
    return redirect("clusters:list")


@login_required
@require_POST
def member_role(request: AuthenticatedHttpRequest, membership_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    membership = get_object_or_404(Membership, pk=membership_id, workspace=tenancy.workspace)
    form = RoleForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationError("Pick a role.")
        services.change_role(by=tenancy.membership, membership=membership, role=form.cleaned_data["role"])
        messages.success(request, f"{membership.user} is now {form.cleaned_data['role']}.")
    except PermissionDenied as exc:
        messages.error(request, str(exc))
    except ValidationError as exc:
        messages.error(request, " ".join(exc.messages))
    return redirect("accounts:members")


@login_required
@require_POST
def member_remove(request: AuthenticatedHttpRequest, membership_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    membership = get_object_or_404(Membership, pk=membership_id, workspace=tenancy.workspace)
    try:
        services.remove_member(by=tenancy.membership, membership=membership)
        messages.success(request, f"Removed {membership.user}.")
    except (PermissionDenied, ValidationError) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    return redirect("accounts:members")


@login_required
def ssh_keys(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    form = SSHKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.add_ssh_key(workspace=tenancy.workspace, created_by=request.user, **form.cleaned_data)
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Added key {form.cleaned_data['name']}.")
            return redirect("accounts:ssh_keys")
    keys = SSHKey.objects.filter(workspace=tenancy.workspace)
    return render(request, "accounts/ssh_keys.html", {"form": form, "keys": keys})


@login_required
@require_POST
def ssh_key_delete(request: AuthenticatedHttpRequest, key_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    key = get_object_or_404(SSHKey, pk=key_id, workspace=tenancy.workspace)
    services.delete_ssh_key(workspace=tenancy.workspace, key=key)
    messages.success(request, f"Deleted key {key.name}. Running clusters keep the keys they were created with.")
    return redirect("accounts:ssh_keys")


@login_required
def environments(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    form = EnvironmentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.create_environment(by=tenancy.membership, **form.cleaned_data)
        except PermissionDenied as exc:
            messages.error(request, str(exc))
        except ValidationError as exc:
            apply_errors(form, exc)
        else:
            messages.success(request, f"Created environment {form.cleaned_data['name']}.")
            return redirect("accounts:environments")
    return render(
        request, "accounts/environments.html",
        {"form": form, "environments": tenancy.workspace.environments.all(), "budget_form": BudgetForm()},
    )


@login_required
@require_POST
def environment_budget(request: AuthenticatedHttpRequest, environment_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    environment = get_object_or_404(Environment, pk=environment_id, workspace=tenancy.workspace)
    form = BudgetForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Enter a budget of $0 or more.")
    else:
        try:
            services.set_budget(by=tenancy.membership, environment=environment, **form.cleaned_data)
            messages.success(request, f"Budget of {environment.name} set to {format_money(form.cleaned_data['monthly_budget'])}.")
        except PermissionDenied as exc:
            messages.error(request, str(exc))
    return redirect("accounts:environments")


@login_required
@require_POST
def environment_idle_notice(request: AuthenticatedHttpRequest, environment_id: int) -> HttpResponse:
    tenancy = require_tenancy(request)
    environment = get_object_or_404(Environment, pk=environment_id, workspace=tenancy.workspace)
    form = IdleNoticeForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Enter hours from 0 (never) to 168, e.g. 2 or 0.5.")
    else:
        try:
            services.set_idle_notice_hours(by=tenancy.membership, environment=environment, **form.cleaned_data)
            hours = form.cleaned_data["idle_notice_hours"]
            messages.success(request, f"{environment.name}: idle clusters are noticed after {services.hours_text(hours)} h."
                             if hours
                             else f"{environment.name}: no idle notices.")
        except PermissionDenied as exc:
            messages.error(request, str(exc))
    return redirect("accounts:environments")



def _sso_context(request: AuthenticatedHttpRequest, membership: Membership) -> dict[str, Any]:
    from allauth.socialaccount.models import SocialAccount

    sso_row = SingleSignOn.objects.filter(workspace_id=membership.workspace_id).first()
    link = None
    if sso_row is not None:
        link = SocialAccount.objects.filter(user=request.user, provider=sso_row.provider_id).first()
    return {
        "sso": sso_row, "link": link,
        "signed_in_through": sso_row is not None and sso.signed_in_through(request, membership.workspace_id),
        "must_sign_in": sso.must_sign_in_through(request, membership),
        "sso_login_url": sso.login_url(membership.workspace_id),
        "callback_url": request.build_absolute_uri(sso.callback_url(membership.workspace_id)),
    }


@login_required
def single_sign_on(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The workspace's OpenID Connect provider: the Owner connects, changes, requires or removes
    it; every member links their account to it and signs in through it here."""
    tenancy = require_tenancy(request)
    membership = tenancy.membership
    stored = SingleSignOn.objects.filter(workspace_id=membership.workspace_id).first()
    initial = {"issuer": stored.issuer, "client_id": stored.client_id, "required": stored.required} if stored else {}
    form = SingleSignOnForm(request.POST if request.method == "POST" and "issuer" in request.POST else None, initial=initial)
    status = 200
    if request.method == "POST":
        if not membership.can_change_roles:
            raise Http404("Only an Owner changes single sign-on.")
        if "remove" in request.POST:
            services.disconnect_single_sign_on(by=membership)
            messages.success(request, "Single sign-on is removed: members sign in with their passwords.")
            return redirect("accounts:sso")
        if form.is_valid():
            try:
                services.configure_single_sign_on(by=membership, **form.cleaned_data)
            except ValidationError as exc:
                apply_errors(form, exc)
            else:
                messages.success(request, "Single sign-on is connected.")
                return redirect("accounts:sso")
        status = 400
    context = _sso_context(request, membership)
    response = render(request, "accounts/sso.html", {"form": form, **context}, status=status)
    return sso.allow_forms_to(response, context["sso"]) if context["sso"] else response


def sso_sign_in(request: HtmxHttpRequest) -> HttpResponse:
    """"Sign in with single sign-on": the address tells which workspaces' providers to offer.
    The button posts to allauth's provider view on a page that allows exactly those providers
    as form targets (sso.allow_forms_to), which the address form's page could not know."""
    form = SingleSignOnAddressForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        providers = sso.providers_for_address(form.cleaned_data["email"])
        if providers:
            response = render(request, "account/sso_sign_in.html", {"form": form, "providers": providers})
            return sso.allow_forms_to(response, *providers)
        form.add_error("email", "No workspace with single sign-on has this address as a member or an invitee. "
                                "Sign in with your password, or ask your workspace's Owner.")
    status = 400 if form.is_bound and form.errors else 200
    return render(request, "account/sso_sign_in.html", {"form": form}, status=status)


def sso_start(request: HtmxHttpRequest, provider_id: str) -> HttpResponse:
    """allauth's view that sends the browser to a workspace's provider, which first reads the
    provider's discovery document: a provider that does not answer is said in words."""
    import requests
    from allauth.socialaccount.providers.openid_connect.views import login as provider_login

    try:
        return provider_login(request, provider_id)
    except requests.RequestException:
        return render(request, "accounts/sso_refused.html", {
            "heading": "Your identity provider did not answer",
            "message": "We could not reach your workspace's identity provider just now. Try again in a few minutes; "
                       "if it keeps failing, tell your workspace's Owner.",
        }, status=502)
