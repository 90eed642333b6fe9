"""No new import cycle between apps. The apps are layered, each importing only those below it:

    config (errors, middleware) < accounts < notifications < offers < webhooks < billing < clusters
        < metrics < quotes < api

runcrate_client (the CLI and MCP server) imports none of them: it speaks to the API. Entry
points that wire everything together (config's settings, URLs, ASGI and Celery app, management
commands, migrations) are left out. Every import counts, function-level ones too (a deferred
import is a cycle all the same); `if TYPE_CHECKING:` blocks do not. An upward import is a
cycle in waiting: the ones that exist today are listed below and may only go away."""

from __future__ import annotations

import ast
from pathlib import Path

from django.conf import settings

LAYERS = ["config", "accounts", "notifications", "offers", "webhooks", "billing", "clusters", "metrics", "quotes", "api"]
WIRING = {"config/settings.py", "config/urls.py", "config/asgi.py", "config/celery.py", "config/wsgi.py"}

# (importing app, imported app, file): the upward imports left, each a known cycle to undo
# (docs/architecture.md, "Apps and their layers").
KNOWN_UPWARD = {
    ("accounts", "billing", "accounts/onboarding.py"),  # the checklist reads the ledger
    ("accounts", "clusters", "accounts/onboarding.py"),  # ... and whether a cluster ran
    ("accounts", "clusters", "accounts/services.py"),  # a member removed: close their sockets
    ("accounts", "notifications", "accounts/services.py"),  # invitation emails
    ("accounts", "api", "accounts/services.py"),  # a member removed: revoke their API keys
    ("webhooks", "clusters", "webhooks/services.py"),  # endpoint secrets are sealed as node secrets are
    ("webhooks", "clusters", "webhooks/models.py"),  # ... and unsealed (clusters.sealing belongs in config)
}


def _skipped(path: Path, base: Path) -> bool:
    relative = path.relative_to(base).as_posix()
    return relative in WIRING or "/migrations/" in relative or "/management/" in relative


def _imports(tree: ast.AST) -> list[str]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(sub) for sub in ast.walk(node))
    modules = []
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.append(node.module)
    return modules


def app_imports() -> set[tuple[str, str, str]]:
    base = Path(settings.BASE_DIR)
    found = set()
    for app in [*LAYERS, "runcrate_client"]:
        for path in sorted((base / app).rglob("*.py")):
            if _skipped(path, base):
                continue
            for module in _imports(ast.parse(path.read_text(), str(path))):
                imported = module.split(".")[0]
                if imported != app and imported in [*LAYERS, "runcrate_client"]:
                    found.add((app, imported, path.relative_to(base).as_posix()))
    return found


def test_no_app_imports_one_above_it_but_the_known_ones():
    upward = {
        (app, imported, path) for app, imported, path in app_imports()
        if app in LAYERS and imported in LAYERS and LAYERS.index(imported) > LAYERS.index(app)
    }
    assert upward - KNOWN_UPWARD == set(), "a new import cycle between apps"
    assert KNOWN_UPWARD - upward == set(), "a known cycle is gone: take it off KNOWN_UPWARD"


def test_the_client_imports_no_server_app():
    assert {(a, b, p) for a, b, p in app_imports() if a == "runcrate_client"} == set()
    assert {(a, b, p) for a, b, p in app_imports() if b == "runcrate_client"} == set()


def test_the_offers_page_no_longer_reaches_into_clusters():
    assert {(a, b) for a, b, _ in app_imports() if a == "offers"} <= {("offers", "accounts"), ("offers", "config")}
