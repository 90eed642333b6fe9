"""Writing an audit entry: who (from the request being served), where from, what, and what changed.

Services call `record(...)` once per action, after the change and inside its transaction, so
an action that fails (and rolls back) leaves no entry and one that commits always has one.
Who acted is read from the request the action is served in (AuditRequestMiddleware keeps it
in a context variable): the signed-in member on a page, the API key on the API (its surface
told by the client: CLI, MCP or plain API), an operator in the admin. Outside a request
(Celery tasks, the sweep, the Stripe webhook) the actor is the product itself.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import enum
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db import models
from django.http import HttpRequest

from audit.models import ActorKind, AuditEvent, Surface

if TYPE_CHECKING:
    from clusters.models import ClusterEvent

_request: contextvars.ContextVar[HttpRequest | None] = contextvars.ContextVar("audit_request", default=None)

# The header the runcrate client sends to say which of its programs makes the call.
CLIENT_HEADER = "X-Runcrate-Client"
CLIENT_SURFACES = {"cli": Surface.CLI, "mcp": Surface.MCP}

# Field names whose values are never written to the log, whatever a caller passes.
SECRET_FIELDS = frozenset({"secret", "password", "key_hash", "token", "raw_key", "api_key", "private_key"})
REDACTED = "(secret, not recorded)"

SYSTEM_NAME = "Runcrate"


@contextmanager
def serving(request: HttpRequest) -> Iterator[None]:
    """Entries recorded while this block runs are attributed to `request`."""
    token = _request.set(request)
    try:
        yield
    finally:
        _request.reset(token)


@contextmanager
def as_system() -> Iterator[None]:
    """Entries recorded in this block are the product's own, even inside a request."""
    token = _request.set(None)
    try:
        yield
    finally:
        _request.reset(token)


def current_request() -> HttpRequest | None:
    return _request.get()


def client_address(request: HttpRequest | None) -> str | None:
    # REMOTE_ADDR is the client: config.serve takes X-Forwarded-For only from the proxies named
    # in its settings, so a client cannot put another address here.
    return (request.META.get("REMOTE_ADDR") or None) if request is not None else None


def surface_of(request: HttpRequest | None) -> str:
    if request is None:
        return Surface.SYSTEM
    path = request.path
    if path.startswith("/api/"):
        return CLIENT_SURFACES.get(request.headers.get(CLIENT_HEADER, "").strip().lower(), Surface.API)
    if path.startswith("/admin/"):
        return Surface.ADMIN
    return Surface.PAGE


def _actor(request: HttpRequest | None, surface: str) -> tuple[str, int | None, str]:
    """(kind, user id, label) of whoever made `request`."""
    if request is None:
        return ActorKind.SYSTEM, None, SYSTEM_NAME
    # An API request's auth (api.app.ApiContext) carries the key it was made with; api
    # depends on audit, not the reverse, so the key is read by its attribute.
    api_key = getattr(getattr(request, "auth", None), "api_key", None)
    if api_key is not None:
        return ActorKind.API_KEY, api_key.created_by_id, api_key.prefix
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        kind = ActorKind.OPERATOR if surface == Surface.ADMIN else ActorKind.MEMBER
        return kind, user.pk, user.get_username()
    return ActorKind.UNVERIFIED, None, "not signed in"


def _plain(value: Any) -> Any:
    """A value as JSON keeps it: money and times as strings, choices as their value."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, models.Model):
        return str(value)
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> dict[str, list[Any]]:
    """{field: [before, after]} for each field whose value differs; a created object has no
    before (None), a deleted one no after. Secret fields are named, never valued."""
    before, after = before or {}, after or {}
    diff: dict[str, list[Any]] = {}
    for field in [*before, *(f for f in after if f not in before)]:
        old, new = _plain(before.get(field)), _plain(after.get(field))
        if old != new:
            diff[field] = [REDACTED, REDACTED] if field in SECRET_FIELDS else [old, new]
    return diff


def record(
    workspace_id: int,
    action: str,
    obj: models.Model | None = None,
    *,
    object_type: str = "",
    object_id: Any = "",
    label: str = "",
    before: Mapping[str, Any] | None = None,
    after: Mapping[str, Any] | None = None,
    system: bool = False,
    cluster_event: ClusterEvent | None = None,
    request: HttpRequest | None = None,
) -> AuditEvent:
    """One entry in `workspace_id`'s log: `action` (e.g. "cluster.terminate") on `obj` (or the
    object named by object_type/object_id/label), with the fields that changed between
    `before` and `after`. `system`: the product acted on its own (a budget stop, a sweep),
    whatever request is being served. One INSERT."""
    request = None if system else (request or _request.get())
    surface = surface_of(request)
    kind, user_id, actor = _actor(request, surface)
    if obj is not None:
        object_type = object_type or obj._meta.model_name or ""
        object_id = object_id or obj.pk
        label = label or str(obj)
    return AuditEvent.objects.create(
        workspace_id=workspace_id, actor_kind=kind, actor_user_id=user_id, actor=actor[:150], surface=surface,
        client_address=client_address(request), action=action, object_type=object_type,
        object_id=str(object_id or "")[:40], object_label=label[:200], changes=changes(before, after),
        cluster_event=cluster_event,
    )


@dataclass(frozen=True)
class Action:
    """An action to record beside a cluster event (clusters.services.common.record_event)."""

    name: str
    before: Mapping[str, Any] | None = None
    after: Mapping[str, Any] | None = None


def record_cluster_action(event: ClusterEvent, action: Action, *, system: bool) -> AuditEvent:
    """The audit entry of a cluster action, linked to the cluster event it recorded."""
    cluster = event.cluster
    return record(cluster.workspace_id, action.name, cluster, label=cluster.name, before=action.before,
                  after=action.after, system=system, cluster_event=event)


def fields(obj: models.Model, *names: str) -> dict[str, Any]:
    """`names` of `obj` as they are now: a before or an after for `record`."""
    return {name: getattr(obj, name) for name in names}
