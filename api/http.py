"""The small layer every /api/v1 endpoint goes through: bearer-key auth, the per-key rate limit,
the environment header, the `{"data", "meta"}` / `{"error"}` envelopes, pagination and input checks.

Endpoints are plain functions `handler(request, ctx, **url_kwargs)` returning `ok(...)`/`page(...)`
or raising `ApiError`; `api_route(GET=..., POST=...)` turns them into one URL's view.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.cache import caches
from django.http import Http404, HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from accounts.models import Environment, Membership, Workspace
from accounts.tenancy import Tenancy
from api import keys
from api.models import ApiKey
from clusters.errors import ClusterError

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
CENT = Decimal("0.01")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, details: dict | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.headers = headers or {}


def not_found(what: str = "That") -> ApiError:
    return ApiError(404, "not_found", f"{what} was not found.")


# Service fields named differently in the API's request bodies.
API_FIELD_NAMES = {"offer": "offer_id", "volume": "volume_id"}


def from_cluster_error(error: ClusterError) -> ApiError:
    """A service's refusal in the API's shape: 400s carry the message under their field."""
    details = dict(error.details)
    if error.status == 400 and error.field and error.field != "__all__":
        details = {API_FIELD_NAMES.get(error.field, error.field): [error.message], **details}
    return ApiError(error.status, error.code, error.message, details)


@dataclass(frozen=True)
class ApiContext:
    api_key: ApiKey
    membership: Membership
    environment: Environment

    @property
    def workspace(self) -> Workspace:
        return self.membership.workspace

    @property
    def actor(self) -> str:
        return self.api_key.actor_label

    def require_billing(self) -> None:
        if not self.membership.can_see_billing:
            raise ApiError(403, "forbidden", "Billing is visible to the workspace's Owners and Managers; "
                           "this key acts for a Developer.")


# -- responses ---------------------------------------------------------------------------------


def money(value: Decimal | None) -> str | None:
    """Money as a decimal string with at least cents: 2.5000 -> "2.50", 2.4550 -> "2.455"."""
    if value is None:
        return None
    value = Decimal(value)
    normalized = value.normalize()
    if normalized.as_tuple().exponent > -2:  # type: ignore[operator]
        return str(value.quantize(CENT))
    return str(normalized)


def timestamp(value: datetime | None) -> str | None:
    if value is None:
        return None
    return value.isoformat().replace("+00:00", "Z")


def ok(data: Any, *, status: int = 200, meta: dict | None = None, headers: dict | None = None) -> JsonResponse:
    return JsonResponse({"data": data, "meta": meta or {}}, status=status, headers=headers)


def error_response(error: ApiError) -> JsonResponse:
    body = {"error": {"code": error.code, "message": error.message, "details": error.details}}
    return JsonResponse(body, status=error.status, headers=error.headers)


def pagination(request: HttpRequest) -> tuple[int, int]:
    problems: dict[str, list[str]] = {}
    limit = _int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT, problems)
    offset = _int_param(request, "offset", 0, 0, None, problems)
    if problems:
        raise invalid(problems)
    return limit, offset


def page(request: HttpRequest, items: Sequence | Any, serialize: Callable[[Any], Any], *,
         meta: dict | None = None) -> JsonResponse:
    """One page of a list (a queryset or a list), with total/limit/offset (and `meta`) in meta."""
    limit, offset = pagination(request)
    total = len(items) if isinstance(items, list) else items.count()
    chunk = items[offset:offset + limit]
    return ok([serialize(item) for item in chunk], meta={"total": total, "limit": limit, "offset": offset, **(meta or {})})


def _int_param(request, name, default, minimum, maximum, problems) -> int:
    raw = request.GET.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        problems[name] = ["Must be a whole number."]
        return default
    if value < minimum or (maximum is not None and value > maximum):
        problems[name] = [f"Must be between {minimum} and {maximum}." if maximum is not None else f"Must be at least {minimum}."]
    return value


def invalid(details: dict[str, list[str]], message: str = "Some fields are not valid.") -> ApiError:
    return ApiError(400, "invalid", message, details)


# -- input -------------------------------------------------------------------------------------


def json_body(request: HttpRequest) -> dict[str, Any]:
    if not request.body:
        return {}
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_json", "The request body must be a JSON object.")
    return body


class Fields:
    """Reads typed fields from a JSON body (or query), collecting every problem per field."""

    def __init__(self, source: dict[str, Any]) -> None:
        self.source = source
        self.errors: dict[str, list[str]] = {}

    def _missing(self, name: str, required: bool) -> bool:
        value = self.source.get(name)
        if value is None or value == "":
            if required:
                self.errors[name] = ["This field is required."]
            return True
        return False

    def string(self, name: str, *, required: bool = False, max_length: int = 1000, default: str = "") -> str:
        if self._missing(name, required):
            return default
        value = self.source[name]
        if not isinstance(value, str):
            self.errors[name] = ["Must be a string."]
            return default
        if len(value) > max_length:
            self.errors[name] = [f"At most {max_length} characters."]
        return value.strip()

    def integer(self, name: str, *, required: bool = False, minimum: int | None = None, maximum: int | None = None,
                default: int | None = None) -> int | None:
        if self._missing(name, required):
            return default
        value = self.source[name]
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.errors[name] = ["Must be a whole number."]
            return default
        if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
            self.errors[name] = [f"Must be between {minimum} and {maximum}."]
            return default
        return value

    def identifier(self, name: str, *, required: bool = False) -> int | None:
        """An object id: a positive integer, or its decimal string (clients may send ids as strings)."""
        if self._missing(name, required):
            return None
        value = _as_id(self.source[name])
        if value is None:
            self.errors[name] = ["Must be an id (a positive whole number)."]
        return value

    def identifiers(self, name: str) -> list[int]:
        value = self.source.get(name)
        if value is None:
            return []
        if not isinstance(value, list):
            self.errors[name] = ["Must be a list of ids."]
            return []
        ids = [_as_id(v) for v in value]
        if any(i is None for i in ids):
            self.errors[name] = ["Must be a list of ids (positive whole numbers)."]
            return []
        return list(dict.fromkeys(i for i in ids if i is not None))

    def boolean(self, name: str, *, default: bool = False) -> bool:
        value = self.source.get(name)
        if value is None or value == "":
            return default
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "1", "yes", "false", "0", "no"):
            return value.lower() in ("true", "1", "yes")
        self.errors[name] = ["Must be true or false."]
        return default

    def check(self) -> None:
        if self.errors:
            raise invalid(self.errors)


def _as_id(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and 0 < value < 2**63:
        return value
    return None


def parse_id(raw: str, what: str) -> int:
    value = _as_id(raw)
    if value is None:
        raise not_found(what)
    return value


# -- authentication, environment, rate limit ---------------------------------------------------


UNAUTHENTICATED_HEADERS = {"WWW-Authenticate": 'Bearer realm="runcrate"'}


def authenticate(request: HttpRequest) -> tuple[ApiKey, Membership]:
    header = request.headers.get("Authorization", "")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise ApiError(401, "unauthenticated", "Send an API key as 'Authorization: Bearer rc_live_…' "
                       "(make one on the API keys page).", headers=UNAUTHENTICATED_HEADERS)
    api_key = keys.find_api_key(raw.strip())
    if api_key is None:
        raise ApiError(401, "unauthenticated", "This API key is not valid.", headers=UNAUTHENTICATED_HEADERS)
    if not api_key.is_active:
        raise ApiError(401, "unauthenticated", "This API key is deactivated. Reactivate it on the API keys page "
                       "or use another key.", headers=UNAUTHENTICATED_HEADERS)
    membership = keys.membership_for(api_key)
    if membership is None:
        raise ApiError(401, "unauthenticated", "This API key's creator is no longer a member of its workspace.",
                       headers=UNAUTHENTICATED_HEADERS)
    return api_key, membership


def resolve_environment(request: HttpRequest, workspace: Workspace) -> Environment:
    """X-Environment names the environment (by name or id); without it, the workspace's default."""
    wanted = request.headers.get("X-Environment", "").strip()
    environments = Environment.objects.filter(workspace=workspace)
    if not wanted:
        environment = environments.filter(is_default=True).first() or environments.first()
    else:
        environment = environments.filter(name=wanted).first()
        if environment is None and wanted.isdigit():
            environment = environments.filter(pk=int(wanted)).first()
    if environment is None:
        raise ApiError(404, "environment_not_found", f"Environment {wanted!r} was not found in this workspace.",
                       {"environment": [f"Use one of: {', '.join(environments.values_list('name', flat=True))}."]})
    return environment


def check_rate_limit(api_key: ApiKey) -> None:
    """A fixed window per key: at most API_RATE_LIMIT requests in API_RATE_WINDOW_SECONDS.

    The window starts at the key's first request (cache.add), so there is no shared boundary
    where a burst gets two windows' worth. The cache is Redis when REDIS_URL is set, so every
    web process shares the count.
    """
    limit = settings.API_RATE_LIMIT
    if not limit:
        return
    window = settings.API_RATE_WINDOW_SECONDS
    cache = caches[settings.API_RATE_CACHE]
    key = f"api-rate:{api_key.key_hash[:24]}"
    cache.add(key, 0, timeout=window)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.set(key, 1, timeout=window)
        count = 1
    if count > limit:
        raise ApiError(
            429, "rate_limited", f"Too many requests: this key may make {limit} requests per {window} seconds.",
            {"limit": limit, "window_seconds": window, "retry_after": window},
            headers={"Retry-After": str(window)},
        )


# -- the view wrapper --------------------------------------------------------------------------

Handler = Callable[..., JsonResponse]


def api_route(**handlers: Handler) -> Callable[..., JsonResponse]:
    """One URL of the API: method dispatch, then auth, rate limit and environment, then the handler.

    CSRF: the API authenticates only by bearer key and never reads the session cookie, so a
    cross-site form post carries no credentials it could abuse; the view is csrf-exempt for
    that reason and only for that reason.
    """
    allowed = sorted(handlers)

    @csrf_exempt
    def view(request: HttpRequest, **kwargs: Any) -> JsonResponse:
        started = time.monotonic()
        try:
            handler = handlers.get(request.method or "")
            if handler is None:
                raise ApiError(405, "method_not_allowed", f"{request.method} is not allowed here; use {', '.join(allowed)}.",
                               headers={"Allow": ", ".join(allowed)})
            api_key, membership = authenticate(request)
            check_rate_limit(api_key)
            environment = resolve_environment(request, membership.workspace)
            keys.touch_last_used(api_key)
            ctx = ApiContext(api_key=api_key, membership=membership, environment=environment)
            # The shared lookup helpers (clusters.access) read the tenancy from the request.
            request.tenancy = Tenancy(membership=membership, environment=environment)  # type: ignore[attr-defined]
            return handler(request, ctx, **kwargs)
        except ApiError as error:
            return error_response(error)
        except ClusterError as error:
            return error_response(from_cluster_error(error))
        except Http404:
            return error_response(not_found())
        except Exception:
            log.exception("API %s %s failed after %.3fs", request.method, request.path, time.monotonic() - started)
            return error_response(ApiError(500, "internal_error", "Something went wrong on our side; it has been logged."))

    view.api_methods = allowed  # type: ignore[attr-defined]
    return view


def public_route(handler: Handler) -> Callable[..., JsonResponse]:
    """An unauthenticated GET (the schema and its docs)."""

    def view(request: HttpRequest, **kwargs: Any):
        if request.method not in ("GET", "HEAD"):
            return error_response(ApiError(405, "method_not_allowed", "Use GET.", headers={"Allow": "GET"}))
        return handler(request, **kwargs)

    return view


@csrf_exempt
def unknown_endpoint(request: HttpRequest, rest: str = "") -> JsonResponse:
    return error_response(ApiError(404, "not_found", f"There is no endpoint {request.path}; see /api/v1/docs."))
