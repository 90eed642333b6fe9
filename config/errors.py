"""One family of refusals a customer can act on, raised by every app's services and mapped
once to each surface: API errors (api/app.py), form errors (`add_to_form`) and page messages
(`flash`).

`code` is stable (the API sends it), `message` is for people, `field` names the request field
it belongs to (None or "__all__": the request as a whole), `status` is the HTTP status the API
answers, `details` carries numbers such as required/available or per-field messages.
"""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    status = 400

    def __init__(self, code: str, message: str, *, field: str | None = None, details: dict[str, Any] | None = None,
                 status: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.details = details or {}
        if status is not None:
            self.status = status

    @property
    def field_errors(self) -> dict[str, list[str]]:
        """{field: [messages]}, what a form shows under its fields ("__all__" above them)."""
        return {self.field or "__all__": [self.message]}


class PaymentRequired(DomainError):
    status = 402


class Conflict(DomainError):
    status = 409


def add_to_form(form: Any, error: DomainError, field_names: dict[str, str] | None = None) -> None:
    """Show a service's refusal on a Django form: under its field when the form has it."""
    for field, messages in error.field_errors.items():
        field = (field_names or {}).get(field, field)
        for message in messages:
            form.add_error(field if field in form.fields else None, message)


def flash(request: Any, error: DomainError) -> None:
    """Show a service's refusal as a page message (after a redirect)."""
    from django.contrib import messages

    messages.error(request, error.message)
