"""The product's own error pages (templates/400.html, 403.html, 404.html, 500.html) on every
error, DEBUG on or off, each with the Content-Security-Policy header.

With DEBUG on (`make run`) Django answers a 404 with its technical page, which lists every URL
pattern, and a 500 or a 400 with a traceback and settings; django-csp also leaves the CSP
header off 404s and 500s then. A tenant on a development machine must see neither: the pages
here replace them, and the traceback still goes to the console log (django.request)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from csp.constants import HEADER
from csp.middleware import CSPMiddleware
from csp.utils import build_policy
from django.conf import settings
from django.core.exceptions import BadRequest, SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBase
from django.template import loader
from django.utils.safestring import SafeString, mark_safe
from django.views import defaults
from django.views.debug import ExceptionReporter


class CSPOnEveryPageMiddleware(CSPMiddleware):
    """django-csp's middleware, without its DEBUG exemption for 404 and 500: the error pages
    are the product's own under DEBUG too, and get the same policy as every other page."""

    def process_response(self, request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
        if HEADER not in response and not getattr(response, "_csp_exempt", False):
            policy = build_policy(**asdict(self.get_policy_parts(request=request, response=response)))
            if policy:
                response[HEADER] = policy
        return super().process_response(request, response)


class ProductErrorPagesMiddleware:
    """Under DEBUG, the product's 404 page for a URL nothing matches and for a view's Http404
    (Django's own would be the technical page). 400s and 500s go through ProductPageReporter."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # No URL pattern matched: Django raised Resolver404 before any view ran.
        if settings.DEBUG and response.status_code == 404 and getattr(request, "resolver_match", None) is None:
            return defaults.page_not_found(request, Http404())
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if settings.DEBUG and isinstance(exception, Http404):
            return defaults.page_not_found(request, exception)
        return None


class ProductPageReporter(ExceptionReporter):
    """What Django's DEBUG 500 (and 400) response shows: the product's page, not the traceback,
    which the log keeps (settings.DEFAULT_EXCEPTION_REPORTER). With DEBUG off Django shows no
    traceback page, and error emails to ADMINS keep the full report."""

    def _template(self) -> str:
        return "400.html" if isinstance(self.exc_value, SuspiciousOperation | BadRequest) else "500.html"

    def get_traceback_html(self) -> SafeString:
        if not settings.DEBUG:
            return super().get_traceback_html()
        return mark_safe(loader.get_template(self._template()).render())  # a rendered, autoescaped template

    def get_traceback_text(self) -> SafeString:
        if not settings.DEBUG:
            return super().get_traceback_text()
        if self._template() == "400.html":
            return mark_safe("Bad request: something in the address or the form was not valid.")
        return mark_safe("Something went wrong on our side. The error was logged; try again in a moment.")
