from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest

from accounts.models import Membership
from accounts.tenancy import Tenancy


def dev_mail(request: HttpRequest) -> dict[str, Any]:
    """In development, where emails land (the file backend): pages about emails say so."""
    if settings.DEBUG and str(settings.EMAIL_BACKEND).endswith("filebased.EmailBackend"):
        return {"dev_mail_dir": settings.EMAIL_FILE_PATH}
    return {}


def tenancy(request: HttpRequest) -> dict[str, Any]:
    current: Tenancy | None = getattr(request, "tenancy", None)
    if current is None:
        return {"tenancy": None}
    return {
        "tenancy": current,
        "current_workspace": current.workspace,
        "current_environment": current.environment,
        "current_membership": current.membership,
        # Lazy: only the base template's switchers read these.
        "my_memberships": lambda: Membership.objects.filter(user_id=current.membership.user_id).select_related("workspace"),
        "workspace_environments": lambda: current.workspace.environments.all(),
    }
