from __future__ import annotations

from django.http import Http404, HttpRequest

from accounts.tenancy import Tenancy, require_tenancy


def require_billing_access(request: HttpRequest) -> Tenancy:
    """Billing is for Owners and Managers; to anyone else it does not exist."""
    tenancy = require_tenancy(request)
    if not tenancy.membership.can_see_billing:
        raise Http404("Billing is visible to the workspace's Owners and Managers.")
    return tenancy
