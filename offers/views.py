from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from accounts.tenancy import require_tenancy
from clusters.forms import OffersFilterForm
from offers.models import GPUModel
from offers.services import list_offers


@login_required
def offers(request):
    tenancy = require_tenancy(request)
    form = OffersFilterForm(request.GET or None)
    gpus = list(GPUModel.objects.all())
    gpu, machines, include_community = (gpus[0].slug if gpus else ""), 4, False
    if form.is_bound and form.is_valid():
        gpu = form.cleaned_data["gpu"] or gpu
        machines = form.cleaned_data["machines"] or machines
        include_community = form.cleaned_data["include_community"]
    # Offers match the GPU case-insensitively (?gpu=h100); echo the canonical slug so the picker shows it.
    gpu = next((g.slug for g in gpus if g.slug.lower() == gpu.lower()), gpu)
    found = list_offers(gpu, machines, include_community) if not form.errors else []
    context = {
        "form": form, "gpus": gpus, "gpu": gpu, "machines": machines, "include_community": include_community,
        "offers": found, "balance": tenancy.workspace.credit_balance,
    }
    template = "offers/offers.html#offer-results" if request.htmx else "offers/offers.html"
    return render(request, template, context)
