from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import render

from accounts.http import AuthenticatedHttpRequest
from accounts.tenancy import require_tenancy
from offers.forms import OffersFilterForm
from offers.inventory import SORTS, list_offers
from offers.models import NETWORK_CAVEAT, GPUModel, Location, MachineKind


@login_required
def offers(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    form = OffersFilterForm(request.GET or None)
    gpus = list(GPUModel.objects.all())
    gpu, machines, include_community = (gpus[0].slug if gpus else ""), 4, False
    location, kind, sort = "", "", "price"
    if form.is_bound and form.is_valid():
        gpu = form.cleaned_data["gpu"] or gpu
        machines = form.cleaned_data["machines"] or machines
        include_community = form.cleaned_data["include_community"]
        location, kind = form.cleaned_data["location"], form.cleaned_data["kind"]
        sort = form.cleaned_data["sort"] or sort
    elif form.is_bound:
        # Keep what the customer typed in the picker, so the message sits beside it.
        gpu = request.GET.get("gpu") or gpu
        include_community = bool(request.GET.get("include_community"))
    # Offers match the GPU case-insensitively (?gpu=h100); echo the canonical slug so the picker shows it.
    gpu = next((g.slug for g in gpus if g.slug.lower() == gpu.lower()), gpu)
    found = (
        list_offers(gpu, machines, include_community, location=location, kind=kind, sort=sort)
        if not form.errors else []
    )
    context = {
        "form": form, "gpus": gpus, "gpu": gpu, "machines": machines, "include_community": include_community,
        "typed_machines": request.GET.get("machines", machines),
        "location": location, "kind": kind, "sort": sort,
        "locations": Location.objects.all(), "kinds": MachineKind.choices, "sorts": SORTS.items(),
        "offers": found, "balance": tenancy.workspace.credit_balance, "network_caveat": NETWORK_CAVEAT,
    }
    template = "offers/offers.html#offer-results" if request.htmx else "offers/offers.html"
    return render(request, template, context)
