"""Node secrets (WireGuard private keys, the munge key, join tokens) encrypted at rest.

The row holds {"sealed": <Fernet token>} of the secrets' JSON; the key comes from the
environment (settings.NODE_SECRETS_KEY), so a database dump or backup alone gives nothing
that lets anyone onto a cluster's private network.
"""

from __future__ import annotations

import json
from typing import Any

from cryptography.fernet import Fernet
from django.conf import settings


def _fernet() -> Fernet:
    return Fernet(settings.NODE_SECRETS_KEY)


def seal(secrets: dict[str, Any]) -> dict[str, str]:
    if not secrets:
        return {}
    return {"sealed": _fernet().encrypt(json.dumps(secrets, sort_keys=True).encode()).decode()}


def unseal(stored: dict[str, Any] | None) -> dict[str, Any]:
    """The secrets a row holds; a row written before sealing (plain JSON) reads as it is."""
    if not stored:
        return {}
    if set(stored) == {"sealed"}:
        return json.loads(_fernet().decrypt(stored["sealed"].encode()))
    return dict(stored)
