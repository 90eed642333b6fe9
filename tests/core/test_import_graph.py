"""No new import cycle between apps. The apps are layered, each importing only those below it:

    config (errors, middleware) < accounts < notifications < offers < webhooks < billing < clusters
        < metrics < quotes < api

runcrate_client (the CLI and MCP server) imports none of them: it speaks to the API. Entry
points that wire everything together (config's settings, URLs, ASGI and Celery app, management
commands, migrations) are left out. Every import counts, function-level ones too (a deferred
import is a cycle all the same); `if TYPE_CHECKING:` blocks do not. An upward import is a
cycle in waiting, and there is none: an app below tells the ones above what happened through
a signal (accounts.signals), and code that reads several apps lives in the highest of them."""

from __future__ import annotations

import ast
from pathlib import Path

from django.conf import settings

LAYERS = ["config", "accounts", "notifications", "offers", "webhooks", "billing", "clusters", "metrics", "quotes", "api"]
WIRING = {"config/settings.py", "config/urls.py", "config/asgi.py", "config/celery.py", "config/wsgi.py"}

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


def app_imports(base: Path | None = None) -> set[tuple[str, str, str]]:
    base = base or Path(settings.BASE_DIR)
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


def upward(found: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    return {
        (app, imported, path) for app, imported, path in found
        if app in LAYERS and imported in LAYERS and LAYERS.index(imported) > LAYERS.index(app)
    }


def test_no_app_imports_one_above_it():
    assert upward(app_imports()) == set(), "a new import cycle between apps"


def test_a_new_cycle_is_caught_at_module_level_and_in_a_function_but_not_for_type_checking(tmp_path):
    (tmp_path / "billing").mkdir()
    (tmp_path / "billing" / "ledger.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from accounts.models import Workspace\n"  # downward: fine
        "if TYPE_CHECKING:\n    from api.models import ApiKey\n"  # types only: no cycle
        "def close():\n    from clusters.services.terminate import terminate_cluster\n"
    )
    (tmp_path / "offers").mkdir()
    (tmp_path / "offers" / "views.py").write_text("import clusters.forms\n")
    assert upward(app_imports(tmp_path)) == {
        ("billing", "clusters", "billing/ledger.py"),
        ("offers", "clusters", "offers/views.py"),
    }


def test_the_client_imports_no_server_app():
    assert {(a, b, p) for a, b, p in app_imports() if a == "runcrate_client"} == set()
    assert {(a, b, p) for a, b, p in app_imports() if b == "runcrate_client"} == set()


def test_the_offers_page_no_longer_reaches_into_clusters():
    assert {(a, b) for a, b, _ in app_imports() if a == "offers"} <= {("offers", "accounts"), ("offers", "config"), ("offers", "notifications")}
