from __future__ import annotations


class ClusterError(Exception):
    """A refusal a customer can act on. `code` is stable (the API sends it), `field` names
    the form field it belongs to, `details` carries numbers such as required/available."""

    status = 400

    def __init__(self, code: str, message: str, *, field: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.field = field
        self.details = details or {}


class InsufficientCredits(ClusterError):
    status = 402


class Conflict(ClusterError):
    status = 409
