from __future__ import annotations

from accounts.tenancy import ENVIRONMENT_SESSION_KEY, WORKSPACE_SESSION_KEY, resolve_tenancy


class CurrentWorkspaceMiddleware:
    """Sets request.tenancy: the signed-in user's current workspace membership and environment."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.tenancy = None
        if request.user.is_authenticated:
            request.tenancy = resolve_tenancy(
                request.user,
                request.session.get(WORKSPACE_SESSION_KEY),
                request.session.get(ENVIRONMENT_SESSION_KEY),
            )
        return self.get_response(request)
