from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from accounts import services
from accounts.forms import AddMemberForm, BudgetForm, EnvironmentForm, RoleForm, SSHKeyForm
from accounts.models import Environment, Membership, SSHKey
from accounts.tenancy import ENVIRONMENT_SESSION_KEY, WORKSPACE_SESSION_KEY, require_tenancy


def _next_url(request, default: str = "clusters:list"):
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}):
        return redirect(target)
    return redirect(default)


def _posted_id(request, name: str) -> int:
    """A switcher's posted id; anything but a whole number is an object that does not exist."""
    value = request.POST.get(name, "")
    if not value.isdigit():
        raise Http404(f"No such {name}.")
    return int(value)


def _apply_errors(form, error: ValidationError) -> None:
    if hasattr(error, "error_dict"):
        for field, errors in error.message_dict.items():
            form.add_error(field if field in form.fields else None, errors)
    else:
        form.add_error(None, error.messages)


@login_required
@require_POST
def switch_workspace(request):
    membership = get_object_or_404(Membership, user=request.user, workspace_id=_posted_id(request, "workspace"))
    request.session[WORKSPACE_SESSION_KEY] = membership.workspace_id
    request.session.pop(ENVIRONMENT_SESSION_KEY, None)
    return redirect("clusters:list")


@login_required
@require_POST
def switch_environment(request):
    tenancy = require_tenancy(request)
    environment = get_object_or_404(Environment, workspace=tenancy.workspace, pk=_posted_id(request, "environment"))
    request.session[ENVIRONMENT_SESSION_KEY] = environment.pk
    return _next_url(request)


@login_required
def members(request):
    tenancy = require_tenancy(request)
    form = AddMemberForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.add_member(by=tenancy.membership, **form.cleaned_data)
        except PermissionDenied as exc:
            raise Http404(str(exc)) from None
        except ValidationError as exc:
            _apply_errors(form, exc)
        else:
            messages.success(request, f"Added {form.cleaned_data['username']}.")
            return redirect("accounts:members")
    memberships = tenancy.workspace.memberships.select_related("user").order_by("role", "user__username")
    return render(request, "accounts/members.html", {"form": form, "memberships": memberships})


@login_required
@require_POST
def member_role(request, membership_id: int):
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
def member_remove(request, membership_id: int):
    tenancy = require_tenancy(request)
    membership = get_object_or_404(Membership, pk=membership_id, workspace=tenancy.workspace)
    try:
        services.remove_member(by=tenancy.membership, membership=membership)
        messages.success(request, f"Removed {membership.user}.")
    except (PermissionDenied, ValidationError) as exc:
        messages.error(request, " ".join(getattr(exc, "messages", [str(exc)])))
    return redirect("accounts:members")


@login_required
def ssh_keys(request):
    tenancy = require_tenancy(request)
    form = SSHKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.add_ssh_key(workspace=tenancy.workspace, created_by=request.user, **form.cleaned_data)
        except ValidationError as exc:
            _apply_errors(form, exc)
        else:
            messages.success(request, f"Added key {form.cleaned_data['name']}.")
            return redirect("accounts:ssh_keys")
    keys = SSHKey.objects.filter(workspace=tenancy.workspace)
    return render(request, "accounts/ssh_keys.html", {"form": form, "keys": keys})


@login_required
@require_POST
def ssh_key_delete(request, key_id: int):
    tenancy = require_tenancy(request)
    key = get_object_or_404(SSHKey, pk=key_id, workspace=tenancy.workspace)
    services.delete_ssh_key(workspace=tenancy.workspace, key=key)
    messages.success(request, f"Deleted key {key.name}. Running clusters keep the keys they were created with.")
    return redirect("accounts:ssh_keys")


@login_required
def environments(request):
    tenancy = require_tenancy(request)
    form = EnvironmentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            services.create_environment(by=tenancy.membership, **form.cleaned_data)
        except PermissionDenied as exc:
            messages.error(request, str(exc))
        except ValidationError as exc:
            _apply_errors(form, exc)
        else:
            messages.success(request, f"Created environment {form.cleaned_data['name']}.")
            return redirect("accounts:environments")
    return render(
        request, "accounts/environments.html",
        {"form": form, "environments": tenancy.workspace.environments.all(), "budget_form": BudgetForm()},
    )


@login_required
@require_POST
def environment_budget(request, environment_id: int):
    tenancy = require_tenancy(request)
    environment = get_object_or_404(Environment, pk=environment_id, workspace=tenancy.workspace)
    form = BudgetForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Enter a budget of $0 or more.")
    else:
        try:
            services.set_budget(by=tenancy.membership, environment=environment, **form.cleaned_data)
            messages.success(request, f"Budget of {environment.name} set to ${form.cleaned_data['monthly_budget']:,.2f}.")
        except PermissionDenied as exc:
            messages.error(request, str(exc))
    return redirect("accounts:environments")
