"""Where a webhook may be sent: no server-side request forgery.

An endpoint's host is resolved and *every* address it resolves to must be a public one; the
request then goes to the address that was checked (the Host header and TLS name stay the
endpoint's), so a DNS answer that changes between the check and the connect (rebinding)
cannot point a delivery at the control plane's own network. Loopback is allowed only when
settings.WEBHOOK_ALLOW_LOOPBACK is on (development and the tests); private, link-local,
shared, reserved and multicast ranges never are."""

from __future__ import annotations

import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
from django.conf import settings

from config.errors import DomainError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class TargetRefused(DomainError):
    def __init__(self, message: str) -> None:
        super().__init__("webhook_url_refused", message, field="url")


def address_problem(address: IPAddress) -> str | None:
    """Why this address may not be dialled, or None."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return None if settings.WEBHOOK_ALLOW_LOOPBACK else "is a loopback address"
    if address.is_multicast or address.is_unspecified:
        return "is not a unicast address"
    if not address.is_global:
        return "is in a private or reserved range"
    return None


def resolve(host: str, port: int) -> list[IPAddress]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno == socket.EAI_AGAIN:
            raise TargetRefused(f"The host {host} could not be looked up just now; try again in a moment.") from None
        raise TargetRefused(f"The host {host} does not resolve.") from None
    except UnicodeError:
        raise TargetRefused(f"{host} is not a valid host name.") from None
    seen: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    return seen


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

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def post(url: str, body: bytes, headers: dict[str, str]) -> Response:
    """One POST to the checked address; redirects are not followed (a 3xx is a failure, since
    following one would dial an address nobody checked)."""
    started = time.monotonic()
    try:
        target = check_url(url)
    except TargetRefused as exc:
        return Response(None, 0, exc.message)
    extensions = {"sni_hostname": target.host} if target.url.startswith("https:") else {}
    try:
        with httpx.Client(timeout=settings.WEBHOOK_TIMEOUT_SECONDS, follow_redirects=False, trust_env=False) as client:
            answer = client.post(target.pinned_url, content=body,
                                 headers={**headers, "Host": target.host_header}, extensions=extensions)
    except httpx.HTTPError as exc:
        return Response(None, int((time.monotonic() - started) * 1000), f"{type(exc).__name__}: {exc}"[:500])
    elapsed = int((time.monotonic() - started) * 1000)
    return Response(answer.status_code, elapsed, "" if answer.is_success else f"HTTP {answer.status_code}")
