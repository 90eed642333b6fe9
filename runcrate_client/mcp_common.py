"""What the MCP server and every tool module share: the plan's confirmation tokens, the
tools' context, and API failures turned into tool errors. Below both, so the server loads its
tool modules (runcrate_client/mcp_tools/) and none of them imports the server."""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations

from runcrate_client.api import (
    ApiError,
    RuncrateError,
)
from runcrate_client.client import Client

DEFAULT_TOKEN_TTL = 600.0
TOKEN_PREFIX = "rcplan1"
PLAN_FIELDS = ("offer_id", "machines", "software", "image", "name", "volume_id", "ssh_key_ids")

F = TypeVar("F", bound=Callable[..., Any])


# -- confirmation tokens -----------------------------------------------------------------------


class PlanTokenError(Exception):
    """The token is missing, forged, expired, or was issued for a different cluster."""


def scope_of(answer: dict[str, Any]) -> dict[str, Any]:
    """Where the server acted: the workspace and environment ids of a plan or a cluster."""
    return {"workspace_id": answer.get("workspace_id"), "environment_id": answer.get("environment_id")}


@dataclass
class PlanSigner:
    """Issues and checks HMAC-signed plan tokens. `clock` is injectable for expiry tests."""

    secret: bytes
    ttl: float = DEFAULT_TOKEN_TTL
    clock: Callable[[], float] = time.time
    # nonce -> cluster id, for tokens already spent: a repeat returns the same cluster.
    spent: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_environment(cls) -> PlanSigner:
        secret = os.environ.get("RUNCRATE_MCP_SECRET")
        ttl = float(os.environ.get("RUNCRATE_MCP_TOKEN_TTL") or DEFAULT_TOKEN_TTL)
        return cls(secret.encode() if secret else secrets.token_bytes(32), ttl)

    def issue(self, plan: dict[str, Any], price_per_hour: str, scope: dict[str, Any],
              fields: tuple[str, ...] = PLAN_FIELDS) -> tuple[str, float]:
        """A token for `plan` at `price_per_hour`, planned in `scope` (scope_of the server's answer)."""
        expires_at = self.clock() + self.ttl
        payload = {
            **{k: normalize(k, plan.get(k)) for k in fields},
            "price_per_hour": price_per_hour,
            "workspace_id": scope.get("workspace_id"),
            "environment_id": scope.get("environment_id"),
            "exp": round(expires_at, 3),
            "nonce": secrets.token_hex(12),
        }
        body = _b64(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
        return f"{TOKEN_PREFIX}.{body}.{self._sign(body)}", expires_at

    def offer(self, result: dict[str, Any], plan: dict[str, Any], price_per_hour: str, scope: dict[str, Any],
              next_step: str, fields: tuple[str, ...] = PLAN_FIELDS) -> None:
        """Add a plan tool's answer the token that confirms `plan`, its expiry and what to do next."""
        token, expires_at = self.issue(plan, price_per_hour, scope, fields=fields)
        result["confirmation_token"] = token
        result["token_expires_at"] = datetime.fromtimestamp(expires_at, UTC).isoformat()
        result["next_step"] = next_step

    def verify(self, token: str, request: dict[str, Any], scope: dict[str, Any],
               fields: tuple[str, ...] = PLAN_FIELDS) -> dict[str, Any]:
        """The token's payload, if it is genuine, unexpired, planned in `scope` (the workspace and
        environment ids the server answers now) and matches the request exactly."""
        try:
            prefix, body, signature = token.strip().split(".")
        except (ValueError, AttributeError):
            raise PlanTokenError("not a confirmation token: call plan_cluster and pass its confirmation_token") from None
        if prefix != TOKEN_PREFIX or not hmac.compare_digest(signature, self._sign(body)):
            raise PlanTokenError("invalid confirmation token (not issued by this server): call plan_cluster again")
        payload = json.loads(_unb64(body))
        if self.clock() > payload["exp"]:
            raise PlanTokenError("the confirmation token has expired: call plan_cluster again to re-check the price")
        if payload.get("workspace_id") is None or payload.get("workspace_id") != scope.get("workspace_id"):
            raise PlanTokenError("the confirmation token was issued in another workspace: call plan_cluster here")
        if payload.get("environment_id") is None or payload.get("environment_id") != scope.get("environment_id"):
            raise PlanTokenError("the confirmation token was issued for another environment: call plan_cluster here")
        mismatched = [
            f"{k} (planned {payload.get(k)!r}, asked {normalize(k, request.get(k))!r})"
            for k in fields
            if payload.get(k) != normalize(k, request.get(k))
        ]
        if mismatched:
            raise PlanTokenError(
                "the arguments differ from the plan this token was issued for: " + "; ".join(mismatched)
                + ". Call plan_cluster with the arguments you want."
            )
        return payload

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self.secret, body.encode(), hashlib.sha256).digest())


def normalize(key: str, value: Any) -> Any:
    if key == "software":
        return str(value or "none").lower()
    if key == "ssh_key_ids":
        return sorted(str(v) for v in value) if value else []
    if key == "machines":
        return int(value) if value is not None else None
    if key == "image":
        # Not named is the offer's default: one spelling in the token.
        return str(value).strip() or None if value else None
    if key in ("volume_id", "offer_id"):
        # Ids arrive as numbers or strings (the API takes both): one spelling in the token.
        return str(value) if value else None
    return value


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


# -- the server --------------------------------------------------------------------------------


def api_errors_as_tool_errors(fn: F) -> F:
    """Turn API and transport failures into ToolErrors whose text tells the agent what went wrong."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ApiError as error:
            raise ToolError(f"Runcrate API error {error.status} {error.code}: {error}") from error
        except PlanTokenError as error:
            raise ToolError(f"create_cluster refused: {error}") from error
        except RuncrateError as error:
            raise ToolError(f"Runcrate API unavailable: {error}") from error

    return wrapper  # type: ignore[return-value]


READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=True)


@dataclass
class ToolContext:
    """What every tool module needs: the API client, the token signer and the environment."""

    client: Client
    signer: PlanSigner
    environment: str | None
