from __future__ import annotations

from django.conf import settings

from accounts.models import Membership


def dev_mail(request):
    """In development, where emails land (the file backend): pages about emails say so."""
    if settings.DEBUG and settings.EMAIL_BACKEND.endswith("filebased.EmailBackend"):
        return {"dev_mail_dir": settings.EMAIL_FILE_PATH}
    return {}


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
