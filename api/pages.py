"""The API keys page of a workspace, and the browsable API docs."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.cache import patch_cache_control
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from accounts.http import AuthenticatedHttpRequest, HtmxHttpRequest
from accounts.tenancy import Tenancy, require_tenancy
from api import keys
from api.forms import ApiKeyForm
from api.models import ApiKey


def can_manage(tenancy: Tenancy, api_key: ApiKey) -> bool:
    return keys.can_manage_key(tenancy.membership, api_key)


def _get_key_for_user(request: AuthenticatedHttpRequest, key_id: int) -> tuple[Tenancy, ApiKey]:
    """Keys of the current workspace only; someone else's key is 404 to a Developer."""
    tenancy = require_tenancy(request)
    api_key = get_object_or_404(ApiKey, pk=key_id, workspace=tenancy.workspace)
    if not can_manage(tenancy, api_key):
        raise Http404("Only Owners, Managers and the key's creator manage a key.")
    return tenancy, api_key


@login_required
def key_list(request: AuthenticatedHttpRequest) -> HttpResponse:
    tenancy = require_tenancy(request)
    form = ApiKeyForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        api_key, raw = keys.create_api_key(
            workspace=tenancy.workspace, created_by=request.user, name=form.cleaned_data["name"]
        )
        # Shown once, in this very response: the plaintext is stored nowhere (not in the
        # session, where a redirect that is never followed would leave it), and no cache
        # or back button keeps the page.
        response = _key_page(request, tenancy, ApiKeyForm(), new_key={"id": api_key.pk, "key": raw})
        patch_cache_control(response, no_store=True, no_cache=True, private=True)
        return response
    return _key_page(request, tenancy, form)


def _key_page(request: AuthenticatedHttpRequest, tenancy: Tenancy, form: ApiKeyForm, new_key: dict | None = None) -> HttpResponse:
    api_keys = [
        (api_key, can_manage(tenancy, api_key))
        for api_key in ApiKey.objects.filter(workspace=tenancy.workspace).select_related("created_by")
    ]
    return render(request, "api/keys.html", {"form": form, "api_keys": api_keys, "new_key": new_key})


@login_required
@require_POST
def key_deactivate(request: AuthenticatedHttpRequest, key_id: int) -> HttpResponse:
    _, api_key = _get_key_for_user(request, key_id)
    keys.set_api_key_active(api_key, False)
    messages.success(request, f"Deactivated {api_key.name} ({api_key.prefix}…): it is refused until reactivated.")
    return redirect("api:keys")


@login_required
@require_POST
def key_reactivate(request: AuthenticatedHttpRequest, key_id: int) -> HttpResponse:
    _, api_key = _get_key_for_user(request, key_id)
    try:
        keys.set_api_key_active(api_key, True)
    except ValidationError as error:
        messages.error(request, error.messages[0])
        return redirect("api:keys")
    messages.success(request, f"Reactivated {api_key.name} ({api_key.prefix}…).")
    return redirect("api:keys")


@login_required
@require_POST
def key_delete(request: AuthenticatedHttpRequest, key_id: int) -> HttpResponse:
    _, api_key = _get_key_for_user(request, key_id)
    keys.delete_api_key(api_key)
    messages.success(request, f"Deleted {api_key.name} ({api_key.prefix}…). Anything using it is now refused.")
    return redirect("api:keys")


def schema() -> dict:
    """The OpenAPI document generated from the endpoints' schemas (api/schemas.py)."""
    import api.endpoints  # noqa: F401  (registers the routers)
    from api.app import api as ninja_api

    return dict(ninja_api.get_openapi_schema())


@require_GET
def openapi_json(request: HtmxHttpRequest) -> HttpResponse:
    return JsonResponse(schema(), json_dumps_params={"indent": 2})


@csrf_exempt
def unknown_endpoint(request: HtmxHttpRequest, rest: str = "") -> HttpResponse:
    from api.app import ApiError, error_response

    return error_response(ApiError(404, "not_found", f"There is no endpoint {request.path}; see /api/v1/docs."))


@require_GET
def api_docs(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "api/docs.html", {"schema": schema(), "operations": operations(), "components": components()})


def operations() -> list[dict]:
    """The schema's operations flattened for the docs page, in the schema's order."""
    spec = schema()
    result = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method == "parameters":
                continue
            params = item.get("parameters", []) + op.get("parameters", [])
            body = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema")
            result.append({
                "id": op["operationId"], "method": method.upper(), "path": path, "summary": op.get("summary", ""),
                "description": op.get("description", ""), "tag": (op.get("tags") or ["API"])[0],
                "parameters": [_param_row(_resolve(p, spec), spec) for p in params],
                "body": _schema_rows(_resolve(body, spec), spec) if body else [],
                "responses": [
                    {"status": status, "description": _resolve(r, spec).get("description", "")}
                    for status, r in op["responses"].items()
                ],
            })
    return result


def components() -> list[dict]:
    spec = schema()
    return [
        {"name": name, "description": node.get("description", ""), "fields": _schema_rows(node, spec)}
        for name, node in spec["components"]["schemas"].items()
    ]


def _resolve(node: Any, spec: dict) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target = spec
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def _type_label(node: Any, spec: dict) -> str:
    if not isinstance(node, dict):
        return ""
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[-1]
    if "enum" in node:
        return "one of " + ", ".join(str(v) for v in node["enum"] if v is not None)
    if "oneOf" in node or "anyOf" in node:
        return " or ".join(_type_label(n, spec) for n in node.get("oneOf") or node.get("anyOf") or [])
    kind = node.get("type", "object")
    kinds = [kind] if isinstance(kind, str) else list(kind)
    labels = []
    for k in kinds:
        if k == "array":
            labels.append(f"array of {_type_label(node.get('items', {}), spec)}")
        elif k != "null":
            labels.append(k + (f" ({node['format']})" if node.get("format") else ""))
    label = " or ".join(labels)
    return f"{label} or null" if "null" in kinds else label


def _param_row(param: dict, spec: dict) -> dict:
    return {"name": param["name"], "in": param["in"], "required": param.get("required", False),
            "type": _type_label(param.get("schema", {}), spec), "description": param.get("description", "")}


def _schema_rows(node: Any, spec: dict) -> list[dict]:
    node = _resolve(node, spec) or {}
    if "allOf" in node:
        return [row for part in node["allOf"] for row in _schema_rows(part, spec)]
    required = set(node.get("required", []))
    return [
        {"name": name, "type": _type_label(prop, spec), "required": name in required,
         "description": _resolve(prop, spec).get("description", "") if isinstance(prop, dict) else ""}
        for name, prop in node.get("properties", {}).items()
    ]
