"""The one rate limiter: a fixed window per bucket in Django's cache (Redis when REDIS_URL is
set, so every web process shares the counts). The API (per key) and the quote form (per
address) count through `allow`.

The window starts at a bucket's first hit (cache.add), so there is no shared boundary where
a burst gets two windows' worth; incr is atomic on Redis and under LocMemCache's lock. When
the cache cannot be reached the limiter lets the request through and logs it: a Redis blip
must not turn every request into a 500.
"""

from __future__ import annotations

import logging

from django.core.cache import caches

log = logging.getLogger(__name__)


def allow(bucket: str, *, limit: int, window: int, cache: str = "default") -> bool:
    """Count one hit in `bucket`; False once it is over `limit` hits in `window` seconds.
    A limit of 0 means no limit."""
    if not limit:
        return True
    key = f"rate:{bucket}"
    backend = caches[cache]
    try:
        backend.add(key, 0, timeout=window)
        try:
            count = backend.incr(key)
        except ValueError:  # expired between add() and incr()
            backend.add(key, 1, timeout=window)
            count = 1
    except Exception:
        log.warning("Rate limiter cache unavailable; letting %s through", bucket, exc_info=True)
        return True
    return count <= limit
