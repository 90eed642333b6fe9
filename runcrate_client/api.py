"""The transport under the Python SDK (runcrate_client.Client) for the JSON API (/api/v1).

The endpoints themselves are generated from the OpenAPI document (endpoints.py); each returns the
`data` part of the success body (`{"data": ..., "meta": {...}}`), and list endpoints a `Page`
carrying the items and the whole `meta`. Error bodies (`{"error": {"code", "message", "details"}}`) raise `ApiError`; a
server that cannot be reached, or that answers something other than the API's JSON, raises
`TransportError`, so callers can always tell "the API said no" from "there was no API".

Configuration is resolved once, by `ClientConfig.resolve`: explicit arguments win over the
environment variables `RUNCRATE_API_KEY`, `RUNCRATE_API_URL`, `RUNCRATE_ENVIRONMENT`, which win
over `~/.runcrate/config.yaml` (or the file named by `RUNCRATE_CONFIG`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
import yaml

DEFAULT_API_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 30.0
# Tells the server which program makes the call; the audit log records it (page, API, CLI, MCP).
CLIENT_HEADER = "X-Runcrate-Client"
CONFIG_KEYS = ("api_key", "api_url", "environment", "workspace")
ENV_VARS = {
    "api_key": "RUNCRATE_API_KEY",
    "api_url": "RUNCRATE_API_URL",
    "environment": "RUNCRATE_ENVIRONMENT",
    "workspace": "RUNCRATE_WORKSPACE",
}

Record = dict[str, Any]


class RuncrateError(Exception):
    """Anything the client could not do; the message is fit to show a person as is."""


class ConfigError(RuncrateError):
    """The client is not configured well enough to make a request (no key, bad config file)."""


class TransportError(RuncrateError):
    """The server could not be reached, timed out, or answered something that is not the API."""


class ApiError(RuncrateError):
    """The API answered with an error body."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details: Any = details if details is not None else {}

    def __str__(self) -> str:
        return describe_api_error(self)

    def __repr__(self) -> str:
        return f"ApiError(status={self.status}, code={self.code!r}, message={self.message!r}, details={self.details!r})"


# The API's message when only the fields' own messages say what is wrong.
GENERIC_INVALID = "Some fields are not valid."


def _joined(parts: Iterable[str]) -> str:
    """Problems one after another: a sentence ends where it ends, a fragment gets a semicolon."""
    text = ""
    for part in parts:
        if text:
            text += " " if text.endswith((".", "!", "?")) else "; "
        text += part
    return text


def describe_api_error(error: ApiError) -> str:
    """One line a person can act on, with the details that matter for this kind of error."""
    message = error.message or error.code or f"HTTP {error.status}"
    details = error.details if isinstance(error.details, Mapping) else {}
    if error.status == 402 and ("required" in details or "available" in details):
        required = format_money(details.get("required"))
        available = format_money(details.get("available"))
        return f"{message} (required {required}, available {available})"
    if error.status == 400 and details:
        parts = []
        for name, problems in details.items():
            if isinstance(problems, (list, tuple)):
                problems = _joined(str(p) for p in problems)
            if str(problems) == message:
                continue  # the message already says it: once is enough
            parts.append(str(problems) if name == "__all__" else f"{name}: {problems}")
        if not parts:
            return message
        if message == GENERIC_INVALID:
            return _joined(parts)
        return f"{message} ({_joined(parts)})"
    if error.status == 429 and details.get("retry_after"):
        return f"{message} (retry after {details['retry_after']}s)"
    return message


def format_money(value: Any) -> str:
    """Render a decimal string from the API as $x.xx (negative as -$x.xx); '-' when absent."""
    from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

    if value is None or value == "":
        return "-"
    try:
        amount = Decimal(str(value)).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    except InvalidOperation:
        return str(value)
    sign = "-" if amount < 0 else ""
    return f"{sign}${abs(amount):,.2f}"


# -- configuration ------------------------------------------------------------------------------


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    override = environ.get("RUNCRATE_CONFIG")
    if override:
        return Path(override).expanduser()
    return Path.home() / ".runcrate" / "config.yaml"


def read_config_file(path: Path) -> dict[str, str]:
    if not path.exists():
        return {}
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path} should hold a mapping of settings, not {type(loaded).__name__}")
    return {str(k): str(v) for k, v in loaded.items() if v is not None}


def write_config_value(key: str, value: str | None, environ: Mapping[str, str] | None = None) -> Path:
    """Set (or, with value None, remove) one setting in the config file; the file stays private (0600)."""
    normalized = key.replace("-", "_").lower()
    if normalized not in CONFIG_KEYS:
        raise ConfigError(f"unknown setting {key!r}; known settings: {', '.join(CONFIG_KEYS)}")
    path = config_path(environ)
    current = read_config_file(path)
    if value is None:
        current.pop(normalized, None)
    else:
        current[normalized] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    # Created 0600 from the start: the file holds an API key, it must never be readable by others.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.safe_dump(current, handle, default_flow_style=False, sort_keys=True)
    os.chmod(path, 0o600)
    return path


@dataclass(frozen=True)
class ClientConfig:
    api_key: str | None
    api_url: str
    environment: str | None
    workspace: str | None = None
    # Where each value came from ("argument", "RUNCRATE_API_KEY", "/path/config.yaml", "default").
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @classmethod
    def resolve(
        cls,
        api_key: str | None = None,
        api_url: str | None = None,
        environment: str | None = None,
        environ: Mapping[str, str] | None = None,
        workspace: str | None = None,
    ) -> ClientConfig:
        environ = os.environ if environ is None else environ
        path = config_path(environ)
        from_file = read_config_file(path)
        explicit = {"api_key": api_key, "api_url": api_url, "environment": environment, "workspace": workspace}
        values: dict[str, str | None] = {}
        sources: dict[str, str] = {}
        for key in CONFIG_KEYS:
            if explicit[key]:
                values[key], sources[key] = explicit[key], "argument"
            elif environ.get(ENV_VARS[key]):
                values[key], sources[key] = environ[ENV_VARS[key]], ENV_VARS[key]
            elif from_file.get(key):
                values[key], sources[key] = from_file[key], str(path)
            else:
                values[key], sources[key] = None, "default"
        url = values["api_url"] or DEFAULT_API_URL
        return cls(
            api_key=values["api_key"],
            api_url=url.rstrip("/"),
            environment=values["environment"],
            workspace=values["workspace"],
            sources=sources,
        )


# -- the client ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Page:
    """One page of a list endpoint, with the whole `meta` (e.g. `total_amount` of a month's usage)."""

    items: list[Record]
    total: int
    limit: int | None
    offset: int
    meta: dict[str, Any] = field(default_factory=dict)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


class Transport:
    """Speaks HTTP to /api/v1: authentication headers, the `{data, meta}` envelope, errors and
    pages. The endpoints themselves are generated from the OpenAPI document (endpoints.py)."""

    def __init__(
        self,
        api_key: str | None,
        base_url: str = DEFAULT_API_URL,
        environment: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        transport: httpx.BaseTransport | None = None,
        workspace: str | None = None,
        program: str = "sdk",
    ) -> None:
        if not api_key:
            raise ConfigError(
                "no API key: set RUNCRATE_API_KEY, or run `runcrate config set api_key rc_live_...`"
            )
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.environment = environment
        headers = {
            "Authorization": f"Bearer {api_key}",
            "Accept": "application/json",
            "User-Agent": f"runcrate-{program}/0.1",
            # Which program calls (sdk, cli, mcp): the workspace's audit log records it as the surface.
            CLIENT_HEADER: program,
        }
        if environment:
            headers["X-Environment"] = environment
        if workspace:
            headers["X-Workspace"] = workspace
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing

    def _send(self, method: str, path: str, params: Mapping[str, Any] | None, json: Any,
              headers: Mapping[str, str] | None) -> httpx.Response:
        url = "/api/v1" + path
        clean_params = {k: _param(v) for k, v in (params or {}).items() if v is not None}
        clean_headers = {k: v for k, v in (headers or {}).items() if v is not None} or None
        try:
            return self._http.request(method, url, params=clean_params, json=json, headers=clean_headers)
        except httpx.TimeoutException as exc:
            raise TransportError(f"{self.base_url} did not answer in time ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise TransportError(f"cannot reach the Runcrate API at {self.base_url}: {exc}") from exc

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        json: Any = None,
        headers: Mapping[str, str | None] | None = None,
    ) -> dict[str, Any]:
        """Send one request and return the whole success envelope ({"data", "meta"})."""
        return self._unwrap(self._send(method, path, params, json, _headers(headers)))

    def text(self, method: str, path: str, *, params: Mapping[str, Any] | None = None) -> str:
        """An endpoint that answers plain text (the Prometheus scrape)."""
        response = self._send(method, path, params, None, None)
        if response.is_success and not response.headers.get("content-type", "").startswith("application/json"):
            return response.text
        self._unwrap(response)
        raise TransportError(f"{self.base_url} answered JSON where text was expected")

    def _unwrap(self, response: httpx.Response) -> dict[str, Any]:
        body: Any = None
        if response.content:
            try:
                body = response.json()
            except ValueError:
                body = None
            if body is None or not isinstance(body, dict):
                kind = response.headers.get("content-type", "unknown content type")
                raise TransportError(
                    f"{self.base_url} answered HTTP {response.status_code} with {kind}, not the Runcrate API's JSON"
                    " (is RUNCRATE_API_URL right?)"
                )
        if response.is_success:
            if body is None:  # 202/204 without a body is still a success
                return {"data": None, "meta": {}}
            if "data" not in body:
                raise TransportError(f"{self.base_url} answered without a `data` field: not the Runcrate API?")
            body.setdefault("meta", {})
            return body
        error = (body or {}).get("error") if isinstance(body, dict) else None
        if not isinstance(error, dict):
            raise ApiError(response.status_code, f"http_{response.status_code}", _reason(response), {})
        details = error.get("details") or {}
        retry_after = response.headers.get("retry-after")
        if response.status_code == 429 and retry_after and isinstance(details, dict):
            details.setdefault("retry_after", retry_after)
        raise ApiError(response.status_code, str(error.get("code") or ""), str(error.get("message") or ""), details)

    def data(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs)["data"]

    def page(self, path: str, params: Mapping[str, Any] | None = None) -> Page:
        body = self.request("GET", path, params=params)
        items = body["data"] or []
        meta = body.get("meta") or {}
        return Page(
            items=list(items),
            total=int(meta.get("total", len(items))),
            limit=meta.get("limit"),
            offset=int(meta.get("offset", 0)),
            meta=dict(meta),
        )

    def iterate(self, path: str, params: Mapping[str, Any] | None = None, page_size: int = 100) -> Iterator[Record]:
        """Every item of a list endpoint, following limit/offset until `total` is reached."""
        offset = 0
        while True:
            page = self.page(path, {**(params or {}), "limit": page_size, "offset": offset})
            yield from page.items
            offset += len(page.items)
            if not page.items or offset >= page.total:
                return

    def iterate_cursor(self, path: str, params: Mapping[str, Any] | None = None,
                       page_size: int = 200) -> Iterator[Record]:
        """Every item of a cursor list (the audit log), following `meta.next_cursor` to the end."""
        cursor: str | None = None
        while True:
            page = self.page(path, {**(params or {}), "limit": page_size, "cursor": cursor})
            yield from page.items
            cursor = page.meta.get("next_cursor")
            if not cursor or not page.items:
                return


def _headers(headers: Mapping[str, str | None] | None) -> dict[str, str] | None:
    return {k: v for k, v in (headers or {}).items() if v is not None} or None


def _reason(response: httpx.Response) -> str:
    return f"HTTP {response.status_code} {response.reason_phrase}".strip()


def _param(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def seg(value: object) -> str:
    """One path segment: an id or a name, quoted."""
    from urllib.parse import quote

    return quote(str(value), safe="")
