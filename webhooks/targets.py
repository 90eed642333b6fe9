"""Where a webhook may be sent: no server-side request forgery.

An endpoint's host is resolved and *every* address it resolves to must be a public one; the
request then goes to the address that was checked (the Host header and TLS name stay the
endpoint's), so a DNS answer that changes between the check and the connect (rebinding)
cannot point a delivery at the control plane's own network. Loopback is allowed only when
settings.WEBHOOK_ALLOW_LOOPBACK is on (development and the tests); private, link-local,
shared, reserved and multicast ranges never are."""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings

from config import outbound
from config.errors import DomainError
from config.outbound import IPAddress, address_problem, embedded_ipv4

__all__ = ["IPAddress", "Target", "TargetRefused", "address_problem", "embedded_ipv4", "resolve"]


class TargetRefused(DomainError):
    def __init__(self, message: str) -> None:
        super().__init__("webhook_url_refused", message, field="url")


def resolve(host: str, port: int) -> list[IPAddress]:
    try:
        return outbound.resolve(host, port)
    except outbound.HostNotResolved as exc:
        raise TargetRefused(exc.message) from None


@dataclass(frozen=True)
class Target:
    url: str
    host: str
    port: int
    address: IPAddress

    @property
    def pinned_url(self) -> str:
        """The URL with its host replaced by the checked address."""
        parts = urlsplit(self.url)
        literal = f"[{self.address}]" if self.address.version == 6 else str(self.address)
        return urlunsplit((parts.scheme, f"{literal}:{self.port}", parts.path or "/", parts.query, ""))

    @property
    def host_header(self) -> str:
        default = 443 if self.url.startswith("https:") else 80
        return self.host if self.port == default else f"{self.host}:{self.port}"


def check_url(url: str) -> Target:
    """The endpoint's URL, resolved and checked; raises TargetRefused (a 400 on `url`)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise TargetRefused("That is not a valid URL.") from None
    allowed = ("https",) if settings.WEBHOOK_REQUIRE_HTTPS else ("https", "http")
    if parts.scheme not in allowed:
        raise TargetRefused(f"Webhook URLs must start with {' or '.join(s + '://' for s in allowed)}.")
    if parts.username or parts.password:
        raise TargetRefused("Put no user name or password in the URL; verify the signature instead.")
    host = parts.hostname or ""
    if not host:
        raise TargetRefused("The URL has no host.")
    port = port or (443 if parts.scheme == "https" else 80)
    addresses = resolve(host, port)
    if not addresses:
        raise TargetRefused(f"The host {host} does not resolve.")
    for address in addresses:
        problem = address_problem(address)
        if problem:
            raise TargetRefused(f"{host} resolves to {address}, which {problem}: webhooks go to public addresses only.")
    return Target(url=url.strip(), host=host, port=port, address=addresses[0])


@dataclass(frozen=True)
class Response:
    status_code: int | None
    elapsed_ms: int
    error: str = ""
    to_loopback: bool = False

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


# What is read of an answer's body before the connection is closed: nothing of it is kept, and a
# receiver streaming gigabytes back must not hold the worker for them.
MAX_ANSWER_BYTES = 64 * 1024


def post(url: str, body: bytes, headers: dict[str, str]) -> Response:
    """One POST to the checked address, finished or cut off within WEBHOOK_TIMEOUT_SECONDS in
    all: connect, send, the answer's headers and its body. httpx's own timeouts bound each read,
    so a receiver that drips a header line every few seconds would never trip them; the whole
    request runs under one deadline instead. Redirects are not followed (a 3xx is a failure,
    since following one would dial an address nobody checked)."""
    started = time.monotonic()
    try:
        target = check_url(url)
    except TargetRefused as exc:
        return Response(None, 0, exc.message)
    deadline = float(settings.WEBHOOK_TIMEOUT_SECONDS)
    address = target.address.ipv4_mapped if isinstance(target.address, ipaddress.IPv6Address) else None
    loopback = (address or target.address).is_loopback
    try:
        status = _run(asyncio.wait_for(_post(target, body, headers, deadline), deadline))
    except TimeoutError:
        return Response(None, _ms_since(started), f"No complete answer within {deadline:g} s: the request was cut off.",
                        loopback)
    except httpx.HTTPError as exc:
        return Response(None, _ms_since(started), f"{type(exc).__name__}: {exc}"[:500], loopback)
    return Response(status, _ms_since(started), "" if 200 <= status < 300 else f"HTTP {status}", loopback)


async def _post(target: Target, body: bytes, headers: dict[str, str], timeout: float) -> int:
    extensions = {"sni_hostname": target.host} if target.url.startswith("https:") else {}
    async with (
        httpx.AsyncClient(timeout=timeout, follow_redirects=False, trust_env=False) as client,
        client.stream("POST", target.pinned_url, content=body, headers={**headers, "Host": target.host_header},
                      extensions=extensions) as answer,
    ):
        read = 0
        async for chunk in answer.aiter_raw():
            read += len(chunk)
            if read >= MAX_ANSWER_BYTES:
                break
        return answer.status_code


def _run(coroutine: Coroutine[Any, Any, int]) -> int:
    """Run the request on an event loop of its own: in this thread (a worker), or in a helper
    thread when this one already runs a loop (an async caller with tasks run inline)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def _ms_since(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
