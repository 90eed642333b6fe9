"""Which addresses the control plane may dial on a customer's behalf (a webhook endpoint, an
OpenID Connect issuer): no server-side request forgery. Only global unicast addresses pass, and
loopback only with settings.WEBHOOK_ALLOW_LOOPBACK (development and the tests)."""

from __future__ import annotations

import ipaddress
import socket

from django.conf import settings

from config.errors import DomainError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class HostNotResolved(DomainError):
    def __init__(self, message: str) -> None:
        super().__init__("host_not_resolved", message)


# IPv6 forms that carry an IPv4 address, which a gateway on the way forwards to: NAT64's
# well-known prefix (RFC 6052) and 6to4 (2002::/16) pass only when that IPv4 address does.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# Only this part of IPv6 is assigned for global unicast; everything outside it (::/96's
# deprecated "IPv4-compatible" form, ::ffff:0:0:0/96 "IPv4-translated", 64:ff9b:1::/48 local
# NAT64, fec0::/10 site-local, 5f00::/16 SRv6, what is not assigned yet) is refused outright.
_GLOBAL_UNICAST = ipaddress.IPv6Network("2000::/3")
# Inside 2000::/3 yet never a public host, and not all known to this Python's `is_global`:
# Teredo (2001::/32), documentation (2001:db8::/32, 3fff::/20), ORCHID (2001:10::/28, 2001:20::/28).
_NOT_GLOBAL_V6 = tuple(ipaddress.IPv6Network(n) for n in (
    "2001::/32", "2001:db8::/32", "3fff::/20", "2001:10::/28", "2001:20::/28",
))
_REFUSED = "is in a private or reserved range"


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a NAT64 or 6to4 address carries, or None."""
    if address.sixtofour is not None:
        return address.sixtofour
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def address_problem(address: IPAddress) -> str | None:
    """Why this address may not be dialled, or None. Only global unicast addresses pass, and
    loopback (127.0.0.0/8, ::1 and ::ffff:127.x.y.z: what reaches this computer itself)
    only with settings.WEBHOOK_ALLOW_LOOPBACK."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            address = address.ipv4_mapped  # the kernel dials the IPv4 address itself
        elif (inner := embedded_ipv4(address)) is not None:
            # Judged by the address it carries; loopback in there is some gateway's, never ours.
            if inner.is_loopback or address_problem(inner) is not None:
                return f"carries the IPv4 address {inner}, which is not a public one"
            return None
    if address.is_loopback:
        return None if settings.WEBHOOK_ALLOW_LOOPBACK else "is a loopback address"
    if address.is_multicast or address.is_unspecified:
        return "is not a unicast address"
    if isinstance(address, ipaddress.IPv6Address) and (
        address not in _GLOBAL_UNICAST or any(address in network for network in _NOT_GLOBAL_V6)
    ):
        return _REFUSED
    if not address.is_global:
        return _REFUSED
    return None


def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address `host` resolves to, in the resolver's order."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        if exc.errno == socket.EAI_AGAIN:
            raise HostNotResolved(f"The host {host} could not be looked up just now; try again in a moment.") from None
        raise HostNotResolved(f"The host {host} does not resolve.") from None
    except UnicodeError:
        raise HostNotResolved(f"{host} is not a valid host name.") from None
    seen: list[IPAddress] = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in seen:
            seen.append(address)
    return seen
