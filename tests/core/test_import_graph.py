"""No import loop, between apps or inside one. The apps are layered, each importing only those
below it:

    config (errors, middleware) < accounts < audit < notifications < offers < webhooks < billing
        < clusters < metrics < quotes < api

runcrate_client (the CLI and MCP server) imports none of them: it speaks to the API. Entry
points that wire everything together (config's settings, URLs, ASGI and Celery app, the stack
`make run` starts, management commands, migrations) are left out.

What counts as a dependency of a module:
- every import, function-level ones too (a deferred import is a loop all the same);
  `if TYPE_CHECKING:` blocks do not;
- a string naming a module or something in one ("clusters.emails.cluster_context": loaded
  by import_string all the same);
- a string naming a model ("clusters.Cluster" in a foreign key): a dependency of the
  module on that app's models.

Between apps, imports and dotted strings go downward only. Tables may point at an app above
(a usage row belongs to a machine: billing.MachineUsage -> clusters.Node), since a model
named by string loads nothing; but no chain of dependencies, through any of the three kinds,
may come back to where it started: not between modules of one app, not across apps."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

# A layer is an app, or a part of one that sits lower than the rest of it: every app's
# services record into the audit log (audit.recording, audit.models), and the Audit page
# (the rest of audit) reads accounts' tenancy.
LAYERS = ["config", "audit.models", "audit.recording", "accounts", "audit", "notifications", "offers", "webhooks",
          "billing", "clusters", "metrics", "quotes", "api"]
APPS = [*dict.fromkeys(layer.split(".")[0] for layer in LAYERS), "runcrate_client"]
WIRING = {"config/settings.py", "config/urls.py", "config/asgi.py", "config/celery.py", "config/wsgi.py",
          "config/stack.py"}
IMPORT, DOTTED, MODEL = "import", "dotted", "model"
_DOTTED = re.compile(r"^({})(\.[A-Za-z_]\w*)+$".format("|".join(APPS)))


def layer_of(module: str) -> str:
    """The layer a module is in: the longest of LAYERS naming it or a package above it."""
    inside = [layer for layer in LAYERS if module == layer or module.startswith(layer + ".")]
    return max(inside, key=len) if inside else module.split(".")[0]


def _skipped(path: Path, base: Path) -> bool:
    relative = path.relative_to(base).as_posix()
    return relative in WIRING or "/migrations/" in relative or "/management/" in relative


def _module_name(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


class Project:
    """Every module of the apps, and what each depends on: {module: {(module, kind)}}."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.paths = {
            _module_name(path, base): path
            for app in APPS for path in sorted((base / app).rglob("*.py")) if not _skipped(path, base)
        }
        self.trees = {name: ast.parse(path.read_text(), str(path)) for name, path in self.paths.items()}
        self.models = {
            app: {node.name for node in self.trees[f"{app}.models"].body if isinstance(node, ast.ClassDef)}
            for app in APPS if f"{app}.models" in self.trees
        }
        self.edges = {name: set(self._dependencies(name, tree)) for name, tree in self.trees.items()}

    def _module_of(self, dotted: str) -> str | None:
        """The longest prefix of `dotted` that is one of the project's modules."""
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in self.paths:
                return ".".join(parts[:end])
        return None

    def _named(self, text: str) -> tuple[str, str] | None:
        """(module, kind) a string constant names, if it names one: 'app.Model' or a dotted path
        to a module, or to something defined in one."""
        if not _DOTTED.match(text):
            return None
        app, _, rest = text.partition(".")
        if "." not in rest and rest in self.models.get(app, ()):
            return f"{app}.models", MODEL
        module = self._module_of(text)
        if module is None:
            return None
        # "billing.top_up" (an audit action), "config.yaml": words, not code. A dotted path whose
        # module is the app's package counts only when the package defines what it names.
        if module == app and not self._defines(module, rest.split(".")[0]):
            return None
        return module, DOTTED

    def _defines(self, module: str, name: str) -> bool:
        return any(
            isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name
            or isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
            for node in self.trees[module].body
        )

    def _dependencies(self, name: str, tree: ast.AST) -> Iterable[tuple[str, str]]:
        hidden: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                hidden.update(id(sub) for sub in ast.walk(node))
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if (module := self._module_of(alias.name)) is not None:
                        yield module, IMPORT
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                if (module := self._module_of(node.module)) is not None:
                    yield module, IMPORT
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in self.paths:
                        yield f"{node.module}.{alias.name}", IMPORT
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                named = self._named(node.value)
                if named is not None and named[0] != name:
                    yield named

    def app_edges(self, kinds: Iterable[str] = (IMPORT, DOTTED)) -> set[tuple[str, str, str]]:
        """(layer, layer it depends on, file) for dependencies between two layers, of `kinds`."""
        found = set()
        for name, edges in self.edges.items():
            for target, kind in edges:
                app, other = layer_of(name), layer_of(target)
                if kind in kinds and app != other:
                    found.add((app, other, self.paths[name].relative_to(self.base).as_posix()))
        return found

    def loops(self) -> list[list[str]]:
        """Each set of modules that depend on one another in a ring (Tarjan's strongly connected
        components of more than one module, or one that depends on itself)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def visit(start: str) -> None:
            # Iterative: the module graph is deep enough to reach Python's recursion limit.
            work = [(start, iter(sorted(target for target, _ in self.edges[start])))]
            index[start] = low[start] = len(index)
            stack.append(start)
            on_stack.add(start)
            while work:
                node, targets = work[-1]
                for target in targets:
                    if target not in index:
                        index[target] = low[target] = len(index)
                        stack.append(target)
                        on_stack.add(target)
                        work.append((target, iter(sorted(t for t, _ in self.edges[target]))))
                        break
                    if target in on_stack:
                        low[node] = min(low[node], index[target])
                else:
                    work.pop()
                    if work:
                        low[work[-1][0]] = min(low[work[-1][0]], low[node])
                    if low[node] == index[node]:
                        ring = []
                        while True:
                            member = stack.pop()
                            on_stack.discard(member)
                            ring.append(member)
                            if member == node:
                                break
                        if len(ring) > 1:
                            found.append(sorted(ring))

        for name in sorted(self.edges):
            if name not in index:
                visit(name)
        return sorted(found)


def upward(found: set[tuple[str, str, str]]) -> set[tuple[str, str, str]]:
    return {
        (app, imported, path) for app, imported, path in found
        if app in LAYERS and imported in LAYERS and LAYERS.index(imported) > LAYERS.index(app)
    }


def project(base: Path | None = None) -> Project:
    return Project(base or Path(settings.BASE_DIR))


def test_no_app_imports_or_names_one_above_it():
    assert upward(project().app_edges()) == set(), "a new dependency on an app above"


def test_no_module_depends_on_itself_through_others_inside_an_app_or_across_apps():
    assert project().loops() == [], "an import loop"


def test_tables_point_between_apps_one_way_only():
    edges = {(app, other) for app, other, _ in project().app_edges([MODEL])}
    assert not {(a, b) for a, b in edges if (b, a) in edges}
    # The ones that point up, each for a reason docs/architecture.md gives.
    assert {(a, b) for a, b in edges if a in LAYERS and LAYERS.index(b) > LAYERS.index(a)} == {
        ("billing", "clusters"), ("audit.models", "clusters"), ("audit.models", "accounts"),
    }


def test_every_app_is_in_a_layer():
    apps = {path.parent.name for path in Path(settings.BASE_DIR).glob("*/apps.py")}
    assert apps <= set(APPS)


def _write(base: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_text(text)


def test_a_new_cycle_is_caught_at_module_level_and_in_a_function_but_not_for_type_checking(tmp_path):
    _write(tmp_path, {
        "billing/ledger.py": (
            "from typing import TYPE_CHECKING\n"
            "from accounts.models import Workspace\n"  # downward: fine
            "if TYPE_CHECKING:\n    from api.models import ApiKey\n"  # types only: no cycle
            "def close():\n    from clusters.services.terminate import terminate_cluster\n"
        ),
        "offers/views.py": "import clusters.forms\n",
        "accounts/models.py": "class Workspace: ...\n",
        "api/models.py": "class ApiKey: ...\n",
        "clusters/forms.py": "", "clusters/services/terminate.py": "",
    })
    assert upward(project(tmp_path).app_edges()) == {
        ("billing", "clusters", "billing/ledger.py"),
        ("offers", "clusters", "offers/views.py"),
    }


def test_a_dotted_path_in_a_string_is_a_dependency_but_a_dotted_word_is_not(tmp_path):
    _write(tmp_path, {
        "notifications/kinds.py": (
            'CONTEXT = "clusters.emails.cluster_context"\n'
            'ACTION = "billing.top_up"\n'  # an audit action's name
            'FILE = "config.yaml"\n'
        ),
        "clusters/emails.py": "def cluster_context(stored): ...\n",
        "billing/__init__.py": "", "config/__init__.py": "",
    })
    assert upward(project(tmp_path).app_edges()) == {("notifications", "clusters", "notifications/kinds.py")}


def test_a_foreign_key_is_a_dependency_on_that_apps_models(tmp_path):
    _write(tmp_path, {
        "billing/models.py": 'class Usage:\n    node = ForeignKey("clusters.Node")\n',
        "clusters/models.py": "class Node: ...\n",
    })
    found = project(tmp_path)
    assert found.edges["billing.models"] == {("clusters.models", MODEL)}
    assert found.app_edges([MODEL]) == {("billing", "clusters", "billing/models.py")}
    assert upward(found.app_edges()) == set()  # a table may point up; a loop is what fails


def test_a_loop_inside_one_app_fails_and_so_does_one_closed_by_a_foreign_key(tmp_path):
    _write(tmp_path, {
        "clusters/services.py": "from clusters import tasks\n",
        "clusters/tasks.py": "def advance():\n    from clusters.lifecycle import step\n",
        "clusters/lifecycle.py": "from clusters.services import record\n",
        "clusters/models.py": "from billing.money import CENT\nclass Node: ...\n",
        "billing/money.py": "from billing.models import Usage\n",
        "billing/models.py": 'class Usage:\n    node = ForeignKey("clusters.Node")\n',
    })
    assert project(tmp_path).loops() == [
        ["billing.models", "billing.money", "clusters.models"],
        ["clusters.lifecycle", "clusters.services", "clusters.tasks"],
    ]


def test_the_client_imports_no_server_app():
    found = project().app_edges()
    assert {(a, b, p) for a, b, p in found if a == "runcrate_client"} == set()
    assert {(a, b, p) for a, b, p in found if b == "runcrate_client"} == set()


def test_the_offers_page_no_longer_reaches_into_clusters():
    assert {(a, b) for a, b, _ in project().app_edges() if a == "offers"} <= {
        ("offers", "accounts"), ("offers", "config"), ("offers", "notifications"),
    }


# Each feature of clusters that is more than its state changes is one package: its services,
# what runs it, its tasks, what people read of it and its node side (docs/architecture.md).
FEATURES = {"clusters.network_test": "network_test", "clusters.node_health": "health"}
# The node side runs anywhere, Django or not (docs/nodeops.md): nodeops and each feature's
# node module and parsers.
NODE_SIDE = ("clusters.nodeops", "clusters.network_test.node", "clusters.network_test.parsers",
             "clusters.node_health.node", "clusters.node_health.parsers")


def _is_node_side(module: str) -> bool:
    return any(module == side or module.startswith(side + ".") for side in NODE_SIDE)


def node_side_leaks(found: Project) -> set[tuple[str, str]]:
    """(module, what it depends on) for a node-side module that reaches past the node side:
    into Django, or into the control plane's modules (models, services, tasks, providers)."""
    leaks = set()
    for name, edges in found.edges.items():
        if not _is_node_side(name):
            continue
        leaks |= {(name, target) for target, _ in edges
                  if not _is_node_side(target) and target not in FEATURES and target != "clusters"}
        for node in ast.walk(found.trees[name]):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                leaks |= {(name, module) for module in modules if module.split(".")[0] == "django"}
    return leaks


def features_outside_their_package(found: Project, features: dict[str, str]) -> set[str]:
    """Modules of the app a feature belongs to, named after the feature, outside its package."""
    return {
        name for name in found.paths for package, word in features.items()
        if name.startswith(package.split(".")[0] + ".") and word in name.rpartition(".")[2]
        and not (name == package or name.startswith(package + "."))
    }


def test_each_feature_is_one_package():
    found = project()
    assert set(FEATURES) <= set(found.paths), "a feature package is missing"
    assert features_outside_their_package(found, FEATURES) == set()
    for package in FEATURES:
        scripts = {path.name for path in (found.base / package.replace(".", "/")).glob("*.sh")}
        assert scripts, f"{package} keeps its node script"
        assert not {path.name for path in (found.base / "clusters/nodeops/scripts").glob("*.sh")} & scripts


def test_a_features_module_left_outside_its_package_is_found(tmp_path):
    _write(tmp_path, {
        "clusters/network_test/__init__.py": "", "clusters/network_test/services.py": "",
        "clusters/services/network_tests.py": "", "clusters/templatetags/network_tests.py": "",
        "clusters/health.py": "", "clusters/node_health/__init__.py": "",
    })
    assert features_outside_their_package(project(tmp_path), FEATURES) == {
        "clusters.services.network_tests", "clusters.templatetags.network_tests", "clusters.health",
    }


def test_the_node_side_needs_neither_django_nor_the_control_plane():
    assert node_side_leaks(project()) == set()


def test_a_node_side_module_reaching_into_django_or_the_models_is_found(tmp_path):
    _write(tmp_path, {
        "clusters/nodeops/operations.py": "from clusters.nodeops.runner import NodeRunner\n",
        "clusters/nodeops/runner.py": "class NodeRunner: ...\n",
        "clusters/node_health/__init__.py": "",
        "clusters/node_health/node.py": (
            "from clusters.nodeops.operations import NodeRunner\n"
            "from django.conf import settings\n"
            "def check():\n    from clusters.models import Node\n"
        ),
        "clusters/models.py": "class Node: ...\n",
    })
    assert node_side_leaks(project(tmp_path)) == {
        ("clusters.node_health.node", "django.conf"), ("clusters.node_health.node", "clusters.models"),
    }


def test_nodeops_depends_on_no_feature():
    """nodeops is what every feature's node side is built on: it names none of them."""
    found = project()
    assert {(name, target) for name, edges in found.edges.items() if name.startswith("clusters.nodeops")
            for target, _ in edges if any(target == f or target.startswith(f + ".") for f in FEATURES)} == set()
