from __future__ import annotations

from accounts.models import Membership


def tenancy(request):
    current = getattr(request, "tenancy", None)
    if current is None:
        return {"tenancy": None}
    return {
        "tenancy": current,
        "current_workspace": current.workspace,
        "current_environment": current.environment,
        "current_membership": current.membership,
        # Lazy: only the base template's switchers read these.
        "my_memberships": lambda: Membership.objects.filter(user=request.user).select_related("workspace"),
        "workspace_environments": lambda: current.workspace.environments.all(),
    }
