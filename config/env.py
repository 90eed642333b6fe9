"""Typed environment variables that fail loudly on bad values."""

from __future__ import annotations

import os
from decimal import Decimal, InvalidOperation
from typing import overload

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


@overload
def env_str(name: str, default: str) -> str: ...
@overload
def env_str(name: str, default: None = None) -> str | None: ...
def env_str(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name)
    return default if value is None else value


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def env_decimal(name: str, default: str) -> Decimal:
    value = os.environ.get(name) or default
    try:
        return Decimal(value)
    except InvalidOperation:
        raise ImproperlyConfigured(f"{name} must be a decimal number, got {value!r}") from None


def env_sha256(name: str) -> str:
    """A sha256 checksum (64 hex digits, lowercased) or "" when unset."""
    value = (os.environ.get(name) or "").strip().lower()
    if value and (len(value) != 64 or any(c not in "0123456789abcdef" for c in value)):
        raise ImproperlyConfigured(f"{name} must be a sha256 checksum (64 hex digits), got {value!r}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]
