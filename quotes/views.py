from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse

from accounts.http import HtmxHttpRequest
from config.errors import DomainError, add_to_form
from offers.models import GPUModel
from quotes import services
from quotes.forms import QuoteRequestForm
from quotes.models import Network


def client_ip(request: HtmxHttpRequest) -> str | None:
    # REMOTE_ADDR is the client: config.serve takes X-Forwarded-For only from the proxies named
    # in FORWARDED_ALLOW_IPS; trusting the header here would let anyone dodge the limit.
    return request.META.get("REMOTE_ADDR") or None


def _initial(request: HtmxHttpRequest) -> dict[str, Any]:
    """Pre-fill from the dashboard (?gpu=H100&machines=128&network=infiniband) and the user."""
    initial = {key: request.GET[key] for key in ("gpu", "machines", "network", "term", "term_months") if request.GET.get(key)}
    if request.user.is_authenticated:
        initial.setdefault("contact_name", request.user.get_full_name() or request.user.get_username())
        initial.setdefault("email", request.user.email)
        tenancy = getattr(request, "tenancy", None)
        if tenancy is not None:
            initial.setdefault("company", tenancy.workspace.name)
    if "network" in initial and initial["network"] not in Network.values:
        del initial["network"]
    return initial


def quote_request(request: HtmxHttpRequest) -> HttpResponse:
    """Public (no login): reserved capacity, clusters beyond 64 machines, InfiniBand or RoCE."""
    form = QuoteRequestForm(request.POST or None, initial=_initial(request))
    status = 200
    if request.method == "POST":
        if not services.allow_quote_request(client_ip(request)):
            form.add_error(None, "Too many quote requests from your address. Please try again in an hour, or email us.")
            status = 429
        elif form.is_spam:
            # Look like success so the bot learns nothing; store and send nothing.
            return redirect(reverse("quotes:thanks"))
        elif form.is_valid():
            try:
                services.create_quote_request(**form.cleaned_data_for_service(), user=request.user if request.user.is_authenticated else None, source_ip=client_ip(request))
            except DomainError as exc:
                add_to_form(form, exc)
                status = 400
            else:
                return redirect(reverse("quotes:thanks"))
        else:
            status = 400
    gpus = GPUModel.objects.all()
    return render(request, "quotes/request.html", {"form": form, "gpus": gpus}, status=status)


def quote_thanks(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "quotes/thanks.html")
