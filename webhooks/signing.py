"""The signature every delivery carries, the scheme Stripe documents:

    Runcrate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>

A receiver recomputes v1 over the raw body with its endpoint's secret, compares in constant
time, and refuses timestamps older than its tolerance (replays). `verify` is what a receiver
written in Python would do; the tests and docs/webhooks.md use it."""

from __future__ import annotations

import hashlib
import hmac
import time

HEADER = "Runcrate-Signature"
DEFAULT_TOLERANCE_SECONDS = 300


def sign(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, *, tolerance: int = DEFAULT_TOLERANCE_SECONDS,
           now: float | None = None) -> bool:
    parts: dict[str, list[str]] = {}
    for item in header.split(","):
        key, _, value = item.strip().partition("=")
        parts.setdefault(key, []).append(value)
    try:
        timestamp = int(parts["t"][0])
    except (KeyError, ValueError):
        return False
    if abs((now if now is not None else time.time()) - timestamp) > tolerance:
        return False
    expected = sign(secret, timestamp, body).split("v1=", 1)[1]
    return any(hmac.compare_digest(expected, candidate) for candidate in parts.get("v1", []))
