"""Typed requests: what django-htmx and our middleware put on a request, for views to declare."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.http import HttpRequest
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
