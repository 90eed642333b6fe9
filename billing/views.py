from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from billing.access import require_billing_access
from billing.models import LedgerEntry


@login_required
def billing_overview(request):
    tenancy = require_billing_access(request)
    entries = LedgerEntry.objects.filter(workspace=tenancy.workspace).select_related("cluster")[:100]
    return render(request, "billing/overview.html", {"entries": entries, "workspace": tenancy.workspace})
