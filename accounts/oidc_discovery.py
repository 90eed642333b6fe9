"""Checking an OpenID Connect issuer when an Owner connects it: its discovery document
(`<issuer>/.well-known/openid-configuration`) is read and must name the same issuer and the
endpoints a sign-in needs. The issuer's host must resolve only to public addresses (the
webhooks' rule, config.outbound: loopback only where WEBHOOK_ALLOW_LOOPBACK is on)."""

from __future__ import annotations

from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError

from config.errors import DomainError
from config.outbound import address_problem, resolve

TIMEOUT_SECONDS = 5
NEEDED = ("authorization_endpoint", "token_endpoint", "jwks_uri")


def _refuse(message: str) -> ValidationError:
    return ValidationError({"issuer": message})


def check_issuer(issuer: str) -> dict:
    """The issuer's discovery document, or a ValidationError on `issuer` in plain words."""
    parts = urlsplit(issuer)
    allowed_schemes = ("https",) if settings.WEBHOOK_REQUIRE_HTTPS else ("https", "http")
    if parts.scheme not in allowed_schemes or not parts.hostname:
        raise _refuse("Enter the provider's issuer URL, starting with https://.")
    if parts.query or parts.fragment:
        raise _refuse("An issuer URL has no query or fragment.")
    try:
        addresses = resolve(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    except DomainError as exc:
        raise _refuse(exc.message) from None
    for address in addresses:
        if (problem := address_problem(address)) is not None:
            raise _refuse(f"{parts.hostname} resolves to {address}, which {problem}.")
    url = f"{issuer}/.well-known/openid-configuration"
    try:
        response = httpx.get(url, timeout=TIMEOUT_SECONDS, follow_redirects=False)
    except httpx.HTTPError:
        raise _refuse(f"We could not reach {url}. Check the issuer URL and that the provider is up.") from None
    if response.status_code != 200:
        raise _refuse(f"{url} answered {response.status_code}; an OpenID Connect issuer answers its configuration there.")
    try:
        document = response.json()
    except ValueError:
        raise _refuse(f"{url} did not answer an OpenID Connect configuration.") from None
    if not isinstance(document, dict) or str(document.get("issuer", "")).rstrip("/") != issuer:
        named = document.get("issuer") if isinstance(document, dict) else None
        raise _refuse(f"The provider names its issuer {named!r}, not {issuer!r}: use the issuer it names.")
    missing = [name for name in NEEDED if not document.get(name)]
    if missing:
        raise _refuse(f"The provider's configuration has no {', '.join(missing)}.")
    return document
