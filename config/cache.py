"""Django's Redis cache, failing open: while Redis cannot be reached every read is a miss and
every write is dropped, with a log line, instead of an exception.

The cache holds only counters and short-lived marks: the product's rate limits
(config.ratelimit), allauth's (sign-in, sign-up, password reset, confirmation emails, the
sign-in throttle) and the node-health round marks. Losing them for the length of an outage
lets requests through that a limit would have refused; raising would answer every sign-in
and sign-up with a 500 (allauth calls the cache directly, with no handler of its own).
Writes answer "done" (add: True), so allauth's cache lock is taken and its history reads as
empty: the limit lets the request through.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache.backends.redis import RedisCache, RedisCacheClient
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = logging.getLogger(__name__)

UNREACHABLE = (RedisConnectionError, RedisTimeoutError, OSError)
# One log line per cache connection at most this often: an outage must not flood the log.
LOG_EVERY_SECONDS = 5.0


def redis_cache(url: str, *, prefix: str = "runcrate-cache") -> dict[str, Any]:
    """The CACHES entry for a Redis at `url`: fail-open, and quick to give up on a Redis that
    does not answer (a request waits at most about a second per cache call)."""
    return {
        "BACKEND": "config.cache.FailOpenRedisCache",
        "LOCATION": url,
        "KEY_PREFIX": prefix,
        "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
    }


class FailOpenRedisCacheClient(RedisCacheClient):
    # When this client last logged; each thread's cache connection logs on its own.
    _last_logged: float | None = None

    def _unreachable(self, operation: str, error: BaseException) -> None:
        now = time.monotonic()
        if self._last_logged is None or now - self._last_logged >= LOG_EVERY_SECONDS:
            self._last_logged = now
            log.warning("Cache (Redis) unavailable: %s answered as a miss, rate limits let requests through (%s: %s)",
                        operation, type(error).__name__, error)

    def add(self, key: Any, value: Any, timeout: Any) -> bool:
        try:
            return super().add(key, value, timeout)
        except UNREACHABLE as error:
            self._unreachable("add", error)
            return True

    def get(self, key: Any, default: Any) -> Any:
        try:
            return super().get(key, default)
        except UNREACHABLE as error:
            self._unreachable("get", error)
            return default

    def set(self, key: Any, value: Any, timeout: Any) -> None:
        try:
            super().set(key, value, timeout)
        except UNREACHABLE as error:
            self._unreachable("set", error)

    def touch(self, key: Any, timeout: Any) -> bool:
        try:
            return super().touch(key, timeout)
        except UNREACHABLE as error:
            self._unreachable("touch", error)
            return False

    def delete(self, key: Any) -> bool:
        try:
            return super().delete(key)
        except UNREACHABLE as error:
            self._unreachable("delete", error)
            return False

    def get_many(self, keys: Any) -> dict[Any, Any]:
        try:
            return super().get_many(keys)
        except UNREACHABLE as error:
            self._unreachable("get_many", error)
            return {}

    def has_key(self, key: Any) -> bool:
        try:
            return super().has_key(key)
        except UNREACHABLE as error:
            self._unreachable("has_key", error)
            return False

    def incr(self, key: Any, delta: int) -> int:
        try:
            return super().incr(key, delta)
        except UNREACHABLE as error:
            # As if the counter had just started: a limit counts this hit as the first.
            self._unreachable("incr", error)
            return delta

    def set_many(self, data: Any, timeout: Any) -> None:
        try:
            super().set_many(data, timeout)
        except UNREACHABLE as error:
            self._unreachable("set_many", error)

    def delete_many(self, keys: Any) -> None:
        try:
            super().delete_many(keys)
        except UNREACHABLE as error:
            self._unreachable("delete_many", error)

    def clear(self) -> bool:
        try:
            return super().clear()
        except UNREACHABLE as error:
            self._unreachable("clear", error)
            return False


class FailOpenRedisCache(RedisCache):
    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = FailOpenRedisCacheClient
