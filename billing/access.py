from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest

from accounts.tenancy import Tenancy, require_tenancy


def require_billing_access(request: HttpRequest) -> Tenancy:
    """Billing is for Owners and Managers: a Developer, a member of the workspace, is told that
    their role does not allow it (403, as the API answers), not that the page does not exist."""
    tenancy = require_tenancy(request)
    if not tenancy.membership.can_see_billing:
        raise PermissionDenied("Billing is visible to the workspace's Owners and Managers.")
    return tenancy
