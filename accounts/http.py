"""Typed requests: what django-htmx and our middleware put on a request, for views to declare;
and the one redirect that works for an htmx request and a plain one alike."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, resolve_url
from django_htmx.http import HttpResponseClientRedirect
from django_htmx.middleware import HtmxDetails

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from accounts.tenancy import Tenancy


class HtmxHttpRequest(HttpRequest):
    htmx: HtmxDetails
    # Set by CurrentWorkspaceMiddleware (dashboard) or the API's key authentication.
    tenancy: Tenancy | None


class AuthenticatedHttpRequest(HtmxHttpRequest):
    """A request behind @login_required: its user is signed in."""

    user: User


def page_redirect(request: HtmxHttpRequest, to: Any, *args: Any, **kwargs: Any) -> HttpResponse:
    """Go to another page: htmx is told to load it whole (HX-Redirect), a plain request gets a
    302. `to` is what redirect() takes: a URL, a URL name with its arguments, or a model."""
    if request.htmx:
        return HttpResponseClientRedirect(resolve_url(to, *args, **kwargs))
    return redirect(to, *args, **kwargs)
