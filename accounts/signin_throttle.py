"""Failed sign-ins slow down the client that makes them, for that account only.

allauth's default locks an account for 5 minutes after 5 wrong passwords from anywhere, so
anyone who knows an address can keep its owner out. Here the count is per (client address,
account): after SIGNIN_FREE_ATTEMPTS failures that client waits 1 s before its next try for
that account, then 2 s, 4 s, … up to SIGNIN_BACKOFF_MAX_SECONDS; a success from it starts
over. The owner, from their own address, is never held back by someone else's guesses.
allauth's per-address limit (10 failed sign-ins a minute from one address, any account)
stays. The counts live in the cache, which fails open (config.cache).
"""

from __future__ import annotations

import hashlib
import time

from django.conf import settings
from django.core.cache import cache

# A client's record is forgotten a day after its last failure.
RECORD_SECONDS = 24 * 3600


def _key(client: str, login: str) -> str:
    digest = hashlib.sha256(f"{client}\x00{login.strip().lower()}".encode()).hexdigest()[:40]
    return f"signin-failures:{digest}"


def backoff_seconds(failures: int) -> float:
    """How long a client waits after its `failures`-th failure in a row for one account."""
    over = failures - settings.SIGNIN_FREE_ATTEMPTS
    if over < 0:
        return 0.0
    return float(min(2 ** min(over, 30), settings.SIGNIN_BACKOFF_MAX_SECONDS))


def wait_seconds(client: str, login: str) -> int:
    """Seconds this client must still wait before trying this account again (0: go ahead)."""
    record = cache.get(_key(client, login))
    if not record:
        return 0
    return max(0, int(record["until"] - time.time() + 0.999))


def record_failure(client: str, login: str) -> None:
    key = _key(client, login)
    failures = (cache.get(key) or {}).get("failures", 0) + 1
    cache.set(key, {"failures": failures, "until": time.time() + backoff_seconds(failures)}, RECORD_SECONDS)


def record_success(client: str, login: str) -> None:
    cache.delete(_key(client, login))
