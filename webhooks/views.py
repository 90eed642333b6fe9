"""The Webhooks page of a workspace (Owners and Managers): endpoints, their secrets and events,
the delivery log, re-send and test-send."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from accounts.http import AuthenticatedHttpRequest
from accounts.tenancy import Tenancy, require_tenancy
from config.errors import DomainError, add_to_form, flash
from webhooks import services
from webhooks.forms import EndpointEventsForm, EndpointForm
from webhooks.models import LOOPBACK_NOTE, Delivery, Endpoint


def _require_manager(request: AuthenticatedHttpRequest) -> Tenancy:
    tenancy = require_tenancy(request)
    if not tenancy.membership.can_manage_members:
        raise Http404("Webhooks are managed by the workspace's Owners and Managers.")
    return tenancy


def _get_endpoint_for_user(request: AuthenticatedHttpRequest, endpoint_id: int) -> Endpoint:
    tenancy = _require_manager(request)
    endpoint = services.endpoints_of(tenancy.workspace).filter(pk=endpoint_id).first()
    if endpoint is None:
        raise Http404("No such webhook endpoint in this workspace.")
    return endpoint


@login_required
def endpoint_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = _require_manager(request)
    form = EndpointForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            endpoint = services.create_endpoint(
                workspace=tenancy.workspace, url=form.cleaned_data["url"], events=form.cleaned_data["events"],
                description=form.cleaned_data["description"], created_by=request.user,
            )
        except DomainError as error:
            add_to_form(form, error)
        else:
            messages.success(request, "Endpoint added. Copy its signing secret to verify deliveries.")
            return redirect("webhooks:detail", endpoint.pk)
    endpoints = services.endpoints_of(tenancy.workspace)
    return render(request, "webhooks/endpoints.html", {"form": form, "endpoints": endpoints},
                  status=400 if form.errors else 200)


@login_required
def endpoint_detail(request: AuthenticatedHttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint = _get_endpoint_for_user(request, endpoint_id)
    form = EndpointEventsForm(request.POST or None, initial={"events": endpoint.events, "is_active": endpoint.is_active})
    if request.method == "POST" and form.is_valid():
        try:
            services.update_endpoint(endpoint, events=form.cleaned_data["events"], is_active=form.cleaned_data["is_active"])
        except DomainError as error:
            add_to_form(form, error)
        else:
            messages.success(request, "Endpoint saved.")
            return redirect("webhooks:detail", endpoint.pk)
    version = services.deliveries_version(endpoint)
    if request.htmx and request.method == "GET":
        # The delivery log polls while it shows the newest page: nothing new is 204, which
        # htmx does not swap (an opened attempt log stays open).
        if request.GET.get("version") == version:
            return HttpResponse(status=204)
        template = "webhooks/endpoint.html#deliveries"
    else:
        template = "webhooks/endpoint.html"
    deliveries = Paginator(services.deliveries_of(endpoint), 25).get_page(request.GET.get("page"))
    context = {"endpoint": endpoint, "form": form, "deliveries": deliveries, "version": version,
               "allows_loopback": settings.WEBHOOK_ALLOW_LOOPBACK, "loopback_note": LOOPBACK_NOTE}
    return render(request, template, context, status=400 if form.errors else 200)


@login_required
@require_POST
def endpoint_test(request: AuthenticatedHttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint = _get_endpoint_for_user(request, endpoint_id)
    delivery = services.send_test_event(endpoint)
    messages.success(request, f"Test event {delivery.event.public_id} queued; it shows in the log below.")
    return redirect("webhooks:detail", endpoint.pk)


@login_required
@require_POST
def delivery_resend(request: AuthenticatedHttpRequest, endpoint_id: int, delivery_id: int) -> HttpResponse:
    endpoint = _get_endpoint_for_user(request, endpoint_id)
    delivery = Delivery.objects.filter(endpoint=endpoint, pk=delivery_id).select_related("event", "endpoint").first()
    if delivery is None:
        raise Http404("No such delivery.")
    services.resend(delivery)
    messages.success(request, f"Re-sending {delivery.event.type} {delivery.event.public_id}.")
    return redirect("webhooks:detail", endpoint.pk)


@login_required
@require_POST
def endpoint_rotate_secret(request: AuthenticatedHttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint = _get_endpoint_for_user(request, endpoint_id)
    services.rotate_secret(endpoint)
    messages.success(request, "New signing secret made; deliveries are signed with it from now on.")
    return redirect("webhooks:detail", endpoint.pk)


@login_required
@require_POST
def endpoint_delete(request: AuthenticatedHttpRequest, endpoint_id: int) -> HttpResponse:
    endpoint = _get_endpoint_for_user(request, endpoint_id)
    try:
        services.delete_endpoint(endpoint)
    except DomainError as error:
        flash(request, error)
    else:
        messages.success(request, f"Removed {endpoint.url}.")
    return redirect("webhooks:list")
