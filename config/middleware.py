"""Request checks for every view: a 503 when the database pool is saturated, a 400 for NUL bytes.

Answer 503 with Retry-After, never 500, when every pooled database connection is busy.

A request that waited DB_POOL_TIMEOUT seconds for a connection raised psycopg_pool's
PoolTimeout (wrapped in Django's OperationalError). Raised in a view, `process_exception`
sees it; raised in a middleware below this one, Django has already turned it into a 500
response, so the `got_request_exception` signal marks the request and this middleware swaps
that response for the 503.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from django.core.signals import got_request_exception
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

RETRY_AFTER_SECONDS = 2
MESSAGE = "The service is busy right now; please retry in a few seconds."


def is_database_busy(error: BaseException | None) -> bool:
    """True for a pool timeout, however Django wrapped it."""
    from psycopg_pool import PoolTimeout

    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, PoolTimeout):
            return True
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return False


def busy_response(request: HttpRequest) -> HttpResponse:
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse({"error": {"code": "busy", "message": MESSAGE, "details": {}}}, status=503)
    else:
        response = HttpResponse(MESSAGE, status=503, content_type="text/plain; charset=utf-8")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class DatabaseBusyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if getattr(request, "_database_busy", False):
            return busy_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        return busy_response(request) if is_database_busy(exception) else None


@receiver(got_request_exception)
def _note_database_busy(sender: object, request: HttpRequest | None = None, **kwargs: object) -> None:
    if request is not None and is_database_busy(sys.exc_info()[1]):
        request._database_busy = True  # type: ignore[attr-defined]


log = logging.getLogger(__name__)


class RejectNulBytesMiddleware:
    """A NUL byte in the query string or a posted form field is a 400.

    PostgreSQL cannot store or compare a string holding NUL, so such a value reaching a
    filter or a row is a 500 from the database driver; no legitimate client sends one.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # The API answers a NUL itself, in its error envelope and on the field that holds it.
        if not request.path.startswith("/api/") and self._has_nul(request):
            log.info("Refused a request with a NUL byte: %s %s", request.method, request.path)
            return HttpResponseBadRequest("NUL bytes are not allowed in parameters.", content_type="text/plain")
        return self.get_response(request)

    @staticmethod
    def _has_nul(request: HttpRequest) -> bool:
        if any("\x00" in key or any("\x00" in value for value in values) for key, values in request.GET.lists()):
            return True
        # Only urlencoded bodies: parsing multipart here would consume uploads, and JSON
        # bodies (the API, Stripe's webhook) are read raw by their views.
        if request.method == "POST" and request.content_type == "application/x-www-form-urlencoded":
            return any("\x00" in key or any("\x00" in value for value in values) for key, values in request.POST.lists())
        return False


class NoStoreMiddleware:
    """`Cache-Control: no-store, private` on every answer the application makes, unless the view
    chose its own caching (the public OpenAPI document). Every signed-in page shows the balance
    in its top bar, and pages and API answers show secrets (2FA recovery codes, a new API key),
    money (billing, the CSV export) or members: no browser, proxy or CDN may keep a copy. Static
    files are answered by WhiteNoise, above this middleware, and keep their long caching."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if not response.has_header("Cache-Control"):
            response["Cache-Control"] = "no-store, private"
        return response
