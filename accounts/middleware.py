from __future__ import annotations

from collections.abc import Callable

from django.http import HttpResponse

from accounts.http import HtmxHttpRequest, page_redirect
from accounts.tenancy import ENVIRONMENT_SESSION_KEY, WORKSPACE_SESSION_KEY, NoWorkspace, resolve_tenancy


class CurrentWorkspaceMiddleware:
    """Sets request.tenancy: the signed-in user's current workspace membership and environment."""

    def __init__(self, get_response: Callable[[HtmxHttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HtmxHttpRequest) -> HttpResponse:
        request.tenancy = None
        if request.user.is_authenticated:
            request.tenancy = resolve_tenancy(
                request.user,
                request.session.get(WORKSPACE_SESSION_KEY),
                request.session.get(ENVIRONMENT_SESSION_KEY),
            )
        return self.get_response(request)

    def process_exception(self, request: HtmxHttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, NoWorkspace) and request.user.is_authenticated:
            return page_redirect(request, "accounts:welcome")
        return None
