"""The /api/v1 application on django-ninja: bearer-key auth, the per-key rate limit, the
environment header, the `{"data", "meta"}` / `{"error"}` envelopes and pagination, in one place.

Endpoints (api/endpoints/*) are plain functions that read `context(request)`, call one service
and return `{"data": ..., "meta": ...}` (or raise); their schemas (api/schemas.py) validate the
input, shape the answer and are the OpenAPI document.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pydantic
from django import forms
from django.conf import settings
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, JsonResponse
from django.urls import URLPattern, URLResolver
from django.views.decorators.csrf import csrf_exempt
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError, ValidationErrorContext
from ninja.parser import Parser
from ninja.security import HttpBearer

from accounts.models import Environment, Membership, Workspace
from accounts.tenancy import Tenancy
from api import keys
from api.models import ApiKey
from api.schemas import Error, PageQuery
from config import ratelimit
from config.errors import DomainError
from config.middleware import busy_response, is_database_busy
from offers.models import MAX_MACHINES, MIN_MACHINES

log = logging.getLogger(__name__)

PREFIX = "/api/v1/"
# JSON nested deeper than this is refused before it reaches a schema (json.loads itself would
# recurse until the interpreter's limit, a 500).
MAX_JSON_DEPTH = 32


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


def invalid(details: dict[str, list[str]], message: str = "Some fields are not valid.") -> ApiError:
    return ApiError(400, "invalid", message, details)


def form_data(form_class: type[forms.Form], data: dict[str, Any]) -> dict[str, Any]:
    """A body checked by the dashboard's own form for the same action (one rule, one message):
    its cleaned data, or a 400 with the form's messages under the API's field names."""
    form = form_class({k: v for k, v in data.items() if v is not None})
    if not form.is_valid():
        raise invalid({API_FIELD_NAMES.get(name, name): [str(m) for m in messages]
                       for name, messages in form.errors.items()})
    return form.cleaned_data


def error_response(error: ApiError) -> JsonResponse:
    body = {"error": {"code": error.code, "message": error.message, "details": error.details}}
    return JsonResponse(body, status=error.status, headers=error.headers)


# Service fields named differently in the API's request bodies.
API_FIELD_NAMES = {"offer": "offer_id", "volume": "volume_id"}


def from_domain_error(error: DomainError) -> ApiError:
    """A service's refusal in the API's shape: 400s carry the messages under their fields."""
    details = dict(error.details)
    if error.status == 400:
        for field, messages in error.field_errors.items():
            if field and field != "__all__":
                details.setdefault(API_FIELD_NAMES.get(field, field), messages)
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


def context(request: HttpRequest) -> ApiContext:
    """What the bearer hook (ApiKeyAuth) answered for this request; ninja keeps it as request.auth."""
    auth = getattr(request, "auth", None)
    if not isinstance(auth, ApiContext):
        raise _unauthenticated("This endpoint needs an API key.")
    return auth


# -- responses ----------------------------------------------------------------------------------


def ok(data: Any, **meta: Any) -> dict[str, Any]:
    return {"data": data, "meta": meta}


class Sliceable(Protocol):
    """A queryset, or anything that counts and slices in the database as one does (UsageLines)."""

    def count(self) -> int: ...

    def __getitem__(self, window: slice, /) -> Iterable[Any]: ...


def page(items: list[Any] | Sliceable, query: PageQuery, **meta: Any) -> dict[str, Any]:
    """One page of a list (a queryset, sliced in the database, or a list) with total/limit/offset."""
    total = len(items) if isinstance(items, list) else items.count()
    chunk = list(items[query.offset:query.offset + query.limit]) if query.offset < total else []
    return {"data": chunk, "meta": {"total": total, "limit": query.limit, "offset": query.offset, **meta}}


ERRORS = (401, 403, 404, 429)


def responses(success: dict[int, Any], *errors: int) -> dict[int, Any]:
    """An operation's documented answers: its successes, its errors and the ones every call has."""
    return {**success, **dict.fromkeys(sorted({*errors, *ERRORS}), Error)}


# -- input --------------------------------------------------------------------------------------


def _depth(value: Any, limit: int) -> int:
    stack = [(value, 1)]
    deepest = 0
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > limit:
            return deepest
        if isinstance(node, dict):
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    return deepest


class JsonObjectParser(Parser):
    """Bodies are JSON objects; anything else is a 400 invalid_json, never a 500."""

    def parse_body(self, request: HttpRequest) -> dict[str, Any]:
        if request.content_type in ("multipart/form-data", "application/x-www-form-urlencoded"):
            # A form post with no fields (what a bare `curl -X POST` or a test client sends) is
            # an empty body; a form with fields is not JSON.
            if not request.POST and not request.FILES:
                return {}
            raise ApiError(400, "invalid_json", "Send the body as JSON (Content-Type: application/json).")
        try:
            body = json.loads(request.body)
        except RecursionError:
            raise ApiError(400, "invalid_json", f"The request body nests deeper than {MAX_JSON_DEPTH} levels.") from None
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "invalid_json", "The request body is not valid JSON.") from None
        if not isinstance(body, dict):
            raise ApiError(400, "invalid_json", "The request body must be a JSON object.")
        if _depth(body, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
            raise ApiError(400, "invalid_json", f"The request body nests deeper than {MAX_JSON_DEPTH} levels.")
        return body


# -- authentication, environment, rate limit ----------------------------------------------------


UNAUTHENTICATED_HEADERS = {"WWW-Authenticate": 'Bearer realm="runcrate"'}


def _unauthenticated(message: str) -> ApiError:
    return ApiError(401, "unauthenticated", message, headers=UNAUTHENTICATED_HEADERS)


def authenticate(request: HttpRequest) -> tuple[ApiKey, Membership]:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise _unauthenticated("Send an API key as 'Authorization: Bearer rc_live_…' (make one on the API keys page).")
    api_key = keys.find_api_key(raw.strip())
    if api_key is None:
        raise _unauthenticated("This API key is not valid.")
    if api_key.revoked_at is not None:
        raise _unauthenticated("This API key was revoked when its creator left the workspace. Make a new one.")
    if not api_key.is_active:
        raise _unauthenticated("This API key is deactivated. Reactivate it on the API keys page or use another key.")
    membership = keys.membership_for(api_key)
    if membership is None:
        raise _unauthenticated("This API key's creator is no longer a member of its workspace.")
    wanted = request.headers.get("X-Workspace", "").strip()
    if wanted:
        _check_workspace(membership, wanted)
    return api_key, membership


def _check_workspace(membership: Membership, wanted: str) -> None:
    """X-Workspace (by name or id) must name the key's own workspace: a key acts only in the
    workspace it was made in, where that workspace's admins see and revoke it (docs/api.md)."""
    own = membership.workspace
    if wanted == own.name or wanted == str(own.pk):
        return
    memberships = Membership.objects.select_related("workspace").filter(user_id=membership.user_id)
    found = None
    if "\x00" not in wanted:
        found = memberships.filter(workspace__name=wanted).first()
        if found is None and wanted.isascii() and wanted.isdigit() and len(wanted) < 19:
            found = memberships.filter(workspace_id=int(wanted)).first()
    if found is None:
        raise ApiError(404, "workspace_not_found", f"Workspace {wanted!r} is not one this key's creator belongs to.",
                       {"workspace": [f"This key acts in {own.name!r}."]})
    raise ApiError(403, "wrong_workspace",
                   f"This key acts only in workspace {own.name!r}, where it was made. Make a key in "
                   f"{found.workspace.name!r} (its API keys page) to act there.",
                   {"workspace": [f"This key acts in {own.name!r}."]})


def resolve_environment(request: HttpRequest, workspace: Workspace) -> Environment:
    """X-Environment names the environment (by name or id); without it, the workspace's default."""
    wanted = request.headers.get("X-Environment", "").strip()
    environments = Environment.objects.filter(workspace=workspace)
    if not wanted:
        environment = environments.filter(is_default=True).first() or environments.first()
    elif "\x00" in wanted:
        environment = None
    else:
        environment = environments.filter(name=wanted).first()
        if environment is None and wanted.isascii() and wanted.isdigit() and len(wanted) < 19:
            environment = environments.filter(pk=int(wanted)).first()
    if environment is None:
        raise ApiError(404, "environment_not_found", f"Environment {wanted!r} was not found in this workspace.",
                       {"environment": [f"Use one of: {', '.join(environments.values_list('name', flat=True))}."]})
    return environment


def check_rate_limit(api_key: ApiKey) -> None:
    """At most API_RATE_LIMIT requests per key in API_RATE_WINDOW_SECONDS (config.ratelimit)."""
    limit, window = settings.API_RATE_LIMIT, settings.API_RATE_WINDOW_SECONDS
    if not ratelimit.allow(f"api:{api_key.key_hash[:24]}", limit=limit, window=window, cache=settings.API_RATE_CACHE):
        raise ApiError(
            429, "rate_limited", f"Too many requests: this key may make {limit} requests per {window} seconds.",
            {"limit": limit, "window_seconds": window, "retry_after": window},
            headers={"Retry-After": str(window)},
        )


def refuse_nul_in_query(request: HttpRequest) -> None:
    problems = {name: ["Must not contain NUL characters."]
                for name, values in request.GET.lists() if "\x00" in name or any("\x00" in v for v in values)}
    if problems:
        raise invalid(problems)


class ApiKeyAuth(HttpBearer):
    """`Authorization: Bearer rc_live_…`, then the key's rate limit and its environment.

    CSRF: the API authenticates only by bearer key and never reads the session cookie, so a
    signed-in browser session is no credential here and cross-site requests carry no key."""

    openapi_bearerFormat = "rc_live_…"

    def __call__(self, request: HttpRequest) -> ApiContext:
        api_key, membership = authenticate(request)
        check_rate_limit(api_key)
        refuse_nul_in_query(request)
        environment = resolve_environment(request, membership.workspace)
        keys.touch_last_used(api_key)
        # The shared lookup helpers (clusters.access) read the tenancy from the request.
        request.tenancy = Tenancy(membership=membership, environment=environment)  # type: ignore[attr-defined]
        return ApiContext(api_key=api_key, membership=membership, environment=environment)

    def authenticate(self, request: HttpRequest, token: str) -> Any:  # pragma: no cover - __call__ does it
        """Never reached: __call__ authenticates the whole request; None would mean refused."""
        return None


ENVIRONMENT_HEADER = {
    "name": "X-Environment", "in": "header", "required": False,
    "description": "Environment name or id to act in; the workspace's default when absent.",
    "schema": {"type": "string"},
}
WORKSPACE_HEADER = {
    "name": "X-Workspace", "in": "header", "required": False,
    "description": "The workspace (name or id) the caller expects to act in. A key acts only in the workspace it "
                   "was made in: naming another answers 403 wrong_workspace (404 workspace_not_found when the "
                   "key's creator is not a member there).",
    "schema": {"type": "string"},
}


class RuncrateApi(NinjaAPI):
    def validation_error_from_error_contexts(self, error_contexts: list[ValidationErrorContext]) -> ValidationError:
        contexts = []
        for error_context in error_contexts:
            model, errors = error_context.model, error_context.pydantic_validation_error.errors()
            if model.__ninja_param_source__ == "body" and all(e["type"] == "missing" and len(e["loc"]) == 1 for e in errors):
                # No body at all: report each required field, as for an empty object.
                try:
                    model.model_validate({name: {} for name in model.model_fields})
                except pydantic.ValidationError as error:
                    error_context = ValidationErrorContext(pydantic_validation_error=error, model=model)
            contexts.append(error_context)
        return super().validation_error_from_error_contexts(contexts)

    def get_openapi_schema(self, *, path_prefix: str | None = None, path_params: dict | None = None) -> Any:
        spec = super().get_openapi_schema(path_prefix=PREFIX if path_prefix is None else path_prefix)
        spec["servers"] = [{"url": "/"}]
        # Every authenticated operation reads X-Workspace and X-Environment (in ApiKeyAuth).
        for item in spec["paths"].values():
            for operation in item.values():
                if isinstance(operation, dict) and operation.get("security"):
                    operation.setdefault("parameters", [])[:0] = [WORKSPACE_HEADER, ENVIRONMENT_HEADER]
        return spec


api = RuncrateApi(
    title="Runcrate Clusters API",
    version="1.0.0",
    description=(
        f"GPU clusters of {MIN_MACHINES}–{MAX_MACHINES} machines. Authenticate with `Authorization: Bearer rc_live_…` (make keys on the "
        "API keys page). Success bodies are `{data, meta}`; errors are `{error: {code, message, details}}`; "
        "money is a decimal string in USD."
    ),
    auth=ApiKeyAuth(),
    parser=JsonObjectParser(),
    urls_namespace="api:v1",
    openapi_url=None,
    docs_url=None,
)


# -- errors in the envelope ---------------------------------------------------------------------


@api.exception_handler(ApiError)
def _api_error(request: HttpRequest, exc: ApiError) -> HttpResponse:
    return error_response(exc)


@api.exception_handler(DomainError)
def _domain_error(request: HttpRequest, exc: DomainError) -> HttpResponse:
    return error_response(from_domain_error(exc))


@api.exception_handler(DjangoValidationError)
def _django_invalid(request: HttpRequest, exc: DjangoValidationError) -> HttpResponse:
    if hasattr(exc, "error_dict"):
        return error_response(invalid(exc.message_dict))
    # A refusal about the whole request (no field): its own words are the message.
    return error_response(invalid({"__all__": exc.messages}, " ".join(exc.messages)))


@api.exception_handler(PermissionDenied)
def _forbidden(request: HttpRequest, exc: PermissionDenied) -> HttpResponse:
    return error_response(ApiError(403, "forbidden", str(exc) or "This key's role may not do this."))


@api.exception_handler(Http404)
def _not_found(request: HttpRequest, exc: Http404) -> HttpResponse:
    return error_response(not_found())


@api.exception_handler(RequestDataTooBig)
def _too_big(request: HttpRequest, exc: RequestDataTooBig) -> HttpResponse:
    return error_response(ApiError(413, "body_too_large", f"The request body is over "
                                   f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE:,} bytes."))


@api.exception_handler(AuthenticationError)
def _unauthenticated_error(request: HttpRequest, exc: AuthenticationError) -> HttpResponse:
    return error_response(_unauthenticated("This API key is not valid."))


@api.exception_handler(HttpError)
def _http_error(request: HttpRequest, exc: HttpError) -> HttpResponse:
    # ninja wraps what the body parser raised; the parser's own refusal is already in our shape.
    if isinstance(exc.__cause__, ApiError):
        return error_response(exc.__cause__)
    if isinstance(exc.__cause__, RequestDataTooBig):
        return _too_big(request, exc.__cause__)
    return error_response(ApiError(exc.status_code, "invalid" if exc.status_code == 400 else "error", str(exc)))


def _field(loc: Sequence[Any]) -> str:
    # loc is (source, [param name,] field, [index …]): the first named part after the source.
    names = [part for part in loc[1:] if isinstance(part, str)]
    if len(names) > 1 and loc[0] == "body":
        names = names[1:]  # the body parameter's own name
    return names[0] if names else "__all__"


# pydantic's wording for a wrong type, in the product's words (the rest are already ours or plain).
TYPE_MESSAGES = {
    "missing": "This field is required.",
    "int_type": "Must be a whole number.", "int_parsing": "Must be a whole number.",
    "int_from_float": "Must be a whole number.",
    "bool_type": "Must be true or false.", "bool_parsing": "Must be true or false.",
    "string_type": "Must be text.", "list_type": "Must be a list.", "dict_type": "Must be an object.",
    "float_type": "Must be a number.", "float_parsing": "Must be a number.",
    "model_type": "Must be an object.", "model_attributes_type": "Must be an object.",
}


def _message(error: dict[str, Any]) -> str:
    kind, limits = error.get("type"), error.get("ctx") or {}
    if kind in TYPE_MESSAGES:
        return TYPE_MESSAGES[str(kind)]
    if kind == "string_too_long":
        return f"At most {limits.get('max_length')} characters."
    if kind == "string_too_short":
        return f"At least {limits.get('min_length')} characters."
    if kind in ("greater_than_equal", "greater_than"):
        return f"Must be at least {limits.get('ge', limits.get('gt'))}."
    if kind in ("less_than_equal", "less_than"):
        return f"Must be at most {limits.get('le', limits.get('lt'))}."
    if kind in ("enum", "literal_error"):
        return f"Use one of: {limits.get('expected', '').replace(' or ', ', ')}."
    message = str(error.get("msg", "Not valid."))
    return message.removeprefix("Value error, ")


@api.exception_handler(ValidationError)
def _invalid(request: HttpRequest, exc: ValidationError) -> HttpResponse:
    if any(error["loc"][0] == "path" for error in exc.errors):
        # A path id that is not an id names nothing: the same 404 as an id that is not there.
        return error_response(not_found())
    details: dict[str, list[str]] = {}
    for error in exc.errors:
        details.setdefault(_field(error["loc"]), []).append(_message(error))
    return error_response(invalid(details))


@api.exception_handler(Exception)
def _server_error(request: HttpRequest, exc: Exception) -> HttpResponse:
    if is_database_busy(exc):
        log.warning("API %s %s: no database connection free within the pool timeout", request.method, request.path)
        return busy_response(request)
    log.exception("API %s %s failed", request.method, request.path)
    return error_response(ApiError(500, "internal_error", "Something went wrong on our side; it has been logged."))


# -- URLs ---------------------------------------------------------------------------------------


def _json_method_not_allowed(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        response = view(request, *args, **kwargs)
        if isinstance(response, HttpResponseNotAllowed):
            allowed = ", ".join(sorted(m.strip() for m in response["Allow"].split(",")))
            return error_response(ApiError(405, "method_not_allowed", f"{request.method} is not allowed here; "
                                           f"use {allowed}.", headers={"Allow": allowed}))
        return response

    return csrf_exempt(wrapper)


def urlpatterns() -> list[URLPattern | URLResolver]:
    """ninja's URL patterns, each answering a wrong method in the error envelope."""
    patterns, _, _ = api.urls
    for pattern in patterns:
        if isinstance(pattern, URLPattern):
            pattern.callback = _json_method_not_allowed(pattern.callback)
    return patterns
