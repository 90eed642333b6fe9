"""Writes runcrate_client/endpoints.py from the server's OpenAPI document: one method per
operation, grouped by the operation's tag (`client.clusters.list()`), so each endpoint is
written once, on the server. tests/client/test_sdk_generated.py regenerates the module from the
live schema and fails when the committed one differs.

    python -m runcrate_client.codegen openapi.json > runcrate_client/endpoints.py
    python -m runcrate_client.codegen http://127.0.0.1:8000/api/v1/openapi.json > …

Naming: a tag "Network tests" is the attribute `network_tests`; a method is its operationId in
snake case without the tag's own words (`listClusterEvents` under Clusters is `list_events`).
A list operation (limit/offset) returns a `Page`, and gains `<name>_all` that follows the pages;
a cursor list (limit/cursor, e.g. the audit log) the same, `_all` following `meta.next_cursor`.
"""

from __future__ import annotations

import json
import keyword
import re
import sys
from typing import Any

PREFIX = "/api/v1"
# Sent by the transport from the client's configuration, not per call.
TRANSPORT_HEADERS = {"X-Workspace", "X-Environment"}
PAGE_PARAMS = {"limit", "offset"}
CURSOR_PARAMS = {"limit", "cursor"}
INDENT = "    "


def snake(name: str) -> str:
    name = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name)
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def tag_words(tag: str) -> set[str]:
    words = set(snake(tag).split("_"))
    return words | {w[:-1] for w in words if w.endswith("s")}


def method_name(operation_id: str, tag: str) -> str:
    words = snake(operation_id).split("_")
    kept = [w for w in words if w not in tag_words(tag)]
    return "_".join(kept) if kept else snake(operation_id)


def class_name(tag: str) -> str:
    return "".join(part.capitalize() for part in snake(tag).split("_"))


def python_name(name: str) -> str:
    name = snake(name)
    return f"{name}_" if keyword.iskeyword(name) or name in {"self", "list", "all"} else name


class Spec:
    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document

    def resolve(self, node: Any) -> Any:
        while isinstance(node, dict) and "$ref" in node:
            target: Any = self.document
            for part in node["$ref"].removeprefix("#/").split("/"):
                target = target[part]
            node = target
        return node

    def annotation(self, schema: Any) -> str:
        schema = self.resolve(schema) or {}
        if "anyOf" in schema or "oneOf" in schema:
            parts: list[str] = []
            for option in schema.get("anyOf") or schema.get("oneOf"):
                for part in self.annotation(option).split(" | "):
                    if part not in parts:
                        parts.append(part)
            return " | ".join(parts)
        kinds = schema.get("type", "object")
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        names = []
        for kind in kinds:
            if kind == "array":
                # builtins.list: a resource's own `list` method shadows the name in its class.
                names.append(f"builtins.list[{self.annotation(schema.get('items', {}))}]")
            else:
                names.append({"integer": "int", "string": "str", "boolean": "bool", "number": "float",
                              "null": "None"}.get(kind, "dict[str, Any]"))
        return " | ".join(names)

    def success(self, operation: dict[str, Any]) -> tuple[str, str]:
        """('page' | 'record' | 'none' | 'text', status) of the operation's success answer."""
        for status, response in sorted(operation["responses"].items()):
            if not status.startswith("2"):
                continue
            content = self.resolve(response).get("content") or {}
            if "text/plain" in content:
                return "text", status
            body = self.resolve((content.get("application/json") or {}).get("schema"))
            if not body:
                return "none", status
            data = self.resolve(body.get("properties", {}).get("data", {}))
            return ("page" if data.get("type") == "array" else "record"), status
        return "none", ""


def _argument(name: str, annotation: str, required: bool) -> str:
    if required:
        return f"{name}: {annotation}"
    return f"{name}: {annotation} = None" if "None" in annotation.split(" | ") else f"{name}: {annotation} | None = None"


def _docstring(operation: dict[str, Any], indent: str) -> list[str]:
    text = operation.get("summary", "").strip().rstrip(".") + "."
    description = operation.get("description", "").strip()
    lines = [f'{indent}"""{text}', ""]
    if description:
        words, line = description.replace('"""', "'''").replace("\\", "\\\\").split(), ""
        for word in words:
            if len(indent) + len(line) + len(word) + 1 > 100:
                lines.append(indent + line)
                line = word
            else:
                line = f"{line} {word}".strip()
        lines += [indent + line, ""]
    lines.append(f"{indent}{operation['method'].upper()} {operation['path']} ({operation['operationId']})")
    lines.append(f'{indent}"""')
    return [line.rstrip() for line in lines]


def operations(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every operation of the document, with its path (without /api/v1) and method, in its order."""
    result = []
    for path, item in document["paths"].items():
        if not path.startswith(PREFIX + "/"):
            continue
        for method, operation in item.items():
            if isinstance(operation, dict) and "operationId" in operation:
                result.append({**operation, "path": path.removeprefix(PREFIX), "method": method})
    return result


def _keyword_arguments(spec: Spec, body: dict[str, Any], query: list[dict[str, Any]], headers: list[dict[str, Any]],
                       kind: str) -> list[str]:
    """Body fields, query parameters and headers as keyword arguments, the required ones first."""
    required_body = set(body.get("required", []))
    result = [_argument(python_name(name), spec.annotation(schema), name in required_body)
              for name, schema in body.get("properties", {}).items()]
    paging = {"page": PAGE_PARAMS, "cursor": CURSOR_PARAMS}.get(kind, set())
    result += [_argument(python_name(p["name"]), spec.annotation(p.get("schema")), p.get("required", False))
               for p in query if p["name"] not in paging]
    result += [_argument(python_name(p["name"]), "str", p.get("required", False)) for p in headers]
    return sorted(result, key=lambda a: "=" in a)


def render_method(spec: Spec, operation: dict[str, Any], name: str) -> list[str]:
    kind, _ = spec.success(operation)
    params = [spec.resolve(p) for p in operation.get("parameters", [])]
    path_params = [p for p in params if p["in"] == "path"]
    query = [p for p in params if p["in"] == "query"]
    if kind == "page" and "cursor" in {p["name"] for p in query}:
        kind = "cursor"
    headers = [p for p in params if p["in"] == "header" and p["name"] not in TRANSPORT_HEADERS]
    body_ref = (((operation.get("requestBody") or {}).get("content") or {}).get("application/json") or {}).get("schema")
    body = spec.resolve(body_ref) or {}
    for option in body.get("anyOf") or []:  # an optional body: `X | None`
        if spec.resolve(option).get("properties"):
            body = spec.resolve(option)
    body_fields = body.get("properties", {})

    positional = [_argument(python_name(p["name"]), "int | str", True) for p in path_params]
    keyword_args = _keyword_arguments(spec, body, query, headers, kind)
    page_args = {"page": ["limit: int | None = None", "offset: int | None = None"],
                 "cursor": ["limit: int | None = None", "cursor: str | None = None"]}.get(kind, [])

    path = operation["path"]
    for p in path_params:
        path = path.replace("{" + p["name"] + "}", "{seg(" + python_name(p["name"]) + ")}")
    path_literal = f'f"{path}"' if path_params else f'"{path}"'
    paging = {"page": PAGE_PARAMS, "cursor": CURSOR_PARAMS}.get(kind, set())
    query_names = [p["name"] for p in query if p["name"] not in paging]
    query_dict = "{" + ", ".join(f'"{n}": {python_name(n)}' for n in query_names) + "}"
    returns = {"page": "Page", "cursor": "Page", "record": "Record", "none": "None", "text": "str"}[kind]

    def signature(method: str, extra: list[str], result: str) -> str:
        args = ["self", *positional]
        named = [*keyword_args, *extra]
        if named:
            args += ["*", *named]
        return f"{INDENT}def {method}({', '.join(args)}) -> {result}:"

    lines = [signature(name, page_args, returns), *_docstring(operation, INDENT * 2)]
    call: list[str] = []
    if body_fields:
        call.append("json=_body({" + ", ".join(f'"{f}": {python_name(f)}' for f in body_fields) + "})")
    if headers:
        call.append("headers={" + ", ".join(f'"{p["name"]}": {python_name(p["name"])}' for p in headers) + "}")
    if kind == "page":
        page_params = query_dict[:-1] + (", " if query_names else "") + '"limit": limit, "offset": offset}'
        lines.append(f"{INDENT * 2}return self._transport.page({path_literal}, {page_params})")
    elif kind == "cursor":
        page_params = query_dict[:-1] + (", " if query_names else "") + '"limit": limit, "cursor": cursor}'
        lines.append(f"{INDENT * 2}return self._transport.page({path_literal}, {page_params})")
    elif kind == "text":
        lines.append(f'{INDENT * 2}return self._transport.text("{operation["method"].upper()}", {path_literal}, '
                     f"params={query_dict})")
    else:
        args = [f'"{operation["method"].upper()}"', path_literal]
        if query_names:
            args.append(f"params={query_dict}")
        args += call
        prefix = "" if kind == "none" else "return "
        lines.append(f"{INDENT * 2}{prefix}self._transport.data({', '.join(args)})")
    if kind == "page":
        lines += ["", signature(f"{name}_all", [], "builtins.list[Record]"),
                  f'{INDENT * 2}"""Every item of {name}(), following the pages."""',
                  f"{INDENT * 2}return list(self._transport.iterate({path_literal}, {query_dict}))"]
    if kind == "cursor":
        lines += ["", signature(f"{name}_all", [], "builtins.list[Record]"),
                  f'{INDENT * 2}"""Every item of {name}(), following the cursors."""',
                  f"{INDENT * 2}return list(self._transport.iterate_cursor({path_literal}, {query_dict}))"]
    return lines


def generate(document: dict[str, Any]) -> str:
    document = json.loads(json.dumps(document))  # as served: status codes are strings
    spec = Spec(document)
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for operation in operations(document):
        tag = (operation.get("tags") or ["Default"])[0]
        name = method_name(operation["operationId"], tag)
        taken = {n for n, _ in groups.get(tag, [])}
        if name in taken or f"{name}_all" in taken:
            raise ValueError(f"two operations of {tag!r} would both be named {name!r}; rename an operationId")
        groups.setdefault(tag, []).append((name, operation))

    out = [
        '"""The Runcrate Clusters API, one method per operation: GENERATED by runcrate_client/codegen.py',
        "from the server's OpenAPI document. Do not edit: change the server's endpoint, then regenerate",
        "(python -m runcrate_client.codegen URL-or-file > runcrate_client/endpoints.py); a test fails",
        'when this file and the live schema differ."""',
        "",
        "from __future__ import annotations",
        "",
        "import builtins",
        "from functools import cached_property",
        "from typing import Any, cast",
        "",
        "from runcrate_client.api import Page, Record, Transport, seg",
        "",
        f'API_VERSION = "{document.get("info", {}).get("version", "")}"',
        "",
        "",
        "def _body(fields: dict[str, Any]) -> dict[str, Any]:",
        f'{INDENT}"""A request body without the fields left out (the server applies its defaults)."""',
        f"{INDENT}return {{k: v for k, v in fields.items() if v is not None}}",
        "",
        "",
        "class Resource:",
        f"{INDENT}def __init__(self, transport: Transport) -> None:",
        f"{INDENT * 2}self._transport = transport",
    ]
    index: list[str] = []
    for tag, members in groups.items():
        out += ["", "", f"class {class_name(tag)}(Resource):", f'{INDENT}"""{tag}."""']
        for name, operation in members:
            out += ["", *render_method(spec, operation, name)]
            index.append(f'{INDENT}"{operation["operationId"]}": ("{python_name(tag)}", "{name}"),')
    out += ["", "", "class Resources:", f'{INDENT}"""The API\'s resources as attributes of a Transport (the Client)."""']
    for tag in groups:
        out += ["", f"{INDENT}@cached_property", f"{INDENT}def {python_name(tag)}(self) -> {class_name(tag)}:",
                f'{INDENT * 2}return {class_name(tag)}(cast("Transport", self))']
    out += ["", "", "# operationId -> (attribute, method): what the parity test reads.", "OPERATIONS = {", *index, "}", ""]
    return "\n".join(out)


def load(source: str) -> dict[str, Any]:
    if source.startswith(("http://", "https://")):
        import httpx

        return dict(httpx.get(source, timeout=30).raise_for_status().json())
    with open(source) as handle:
        return dict(json.load(handle))


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        raise SystemExit("usage: python -m runcrate_client.codegen OPENAPI_JSON_FILE_OR_URL > runcrate_client/endpoints.py")
    sys.stdout.write(generate(load(args[0])))


if __name__ == "__main__":
    main()
