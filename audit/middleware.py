"""Keeps the request being served where audit.recording finds it: who acted, from where."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from audit.recording import serving


class AuditRequestMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with serving(request):
            return self.get_response(request)
