"""The house's structure, checked over every project module's imports (docs/architecture.md).

Parses the source (``ast``: module-level and function-level imports alike, ``TYPE_CHECKING`` blocks too) of
every module of the apps, and fails on

- an import circle between modules,
- an upward import between apps (layers: fleet < inventory < telemetry, firmware, procurement, decommission)
  or an import between two apps of the top layer that ``SIBLING_ALLOWED`` does not list,
- a private name (leading underscore) imported from another module,
- an app importing `world/` (the stand-ins for the outside world).

Each check is also shown to catch a fault planted in temporary modules (an upward and a sideways import, a
circle, a private name, an import of world/).

No database: the check reads files.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP_PACKAGES = ("fleet", "inventory", "telemetry", "firmware", "procurement", "decommission", "acceptance")
# Stand-ins for the outside world (BMC simulator, dcgm-exporter simulator): tests, benchmarks and the demo's
# Procfile use them; no app imports them.
WORLD_PACKAGES = ("world",)

# Each app's layer; an app may import its own layer's modules and lower layers only.
LAYERS = {"fleet": 0, "inventory": 1, "telemetry": 2, "firmware": 2, "procurement": 2, "decommission": 2,
          "acceptance": 2}

# Imports between apps of the top layer that are allowed, each with its reason. Keep it short.
SIBLING_ALLOWED: dict[tuple[str, str], str] = {
    ("procurement", "telemetry"): "RMA cases and refresh planning read a GPU's health flags (selectors only)",
    ("procurement", "acceptance"): "the spares forecast's youngest age band reads acceptance's measured "
                                   "infant-mortality rates (procurement.services.infant -> acceptance.stats)",
}

# The project package's composition root: settings, URL roots, the Celery app and the demo bootstrap put the
# apps together, so they import every app. Nothing else in fleet/ may import an app.
COMPOSITION_ROOT = {
    "fleet.settings", "fleet.urls", "fleet.api_urls", "fleet.web_urls", "fleet.celery", "fleet.wsgi", "fleet.asgi",
    "fleet.management.commands.bootstrap",
}

def app_of(module: str) -> str:
    return module.split(".", 1)[0]


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    modules = {}
    for package in APP_PACKAGES:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if "migrations" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


MODULES = project_modules()


def _known(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` is, or is in (``inventory.models.Gpu`` -> ``inventory.models``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


@functools.cache
def parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def imports_of(module: str, modules: dict[str, Path] = MODULES) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every project import in ``module``."""
    path = modules[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name, modules)
                if target:
                    found.append((target, "", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                if submodule in modules:  # ``from inventory import selectors``: the module itself
                    found.append((submodule, "", node.lineno))
                elif target := _known(source, modules):
                    found.append((target, alias.name, node.lineno))
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, list[str]]:
    return {module: sorted({target for target, _, _ in imports_of(module, modules)} - {module}) for module in modules}


GRAPH = import_graph(MODULES)


def circles(graph: dict[str, list[str]] = GRAPH) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            edges = graph[node]
            if i < len(edges):
                work.append((node, i + 1))
                nxt = edges[i]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            for nxt in edges:
                if nxt in on_stack:
                    low[node] = min(low[node], low[nxt])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_check_sees_the_project():
    assert {"fleet.dispatch", "inventory.models", "telemetry.models", "firmware.models"} <= set(MODULES)
    assert "inventory.models" in GRAPH["inventory.services"]
    assert app_of("telemetry.services.ingest") == "telemetry"


def test_no_import_circles():
    bad = circles()
    assert not bad, "import circles (see docs/architecture.md):\n" + "\n".join(" <-> ".join(c) for c in bad)


def upward_imports(modules: dict[str, Path] = MODULES) -> list[str]:
    bad = []
    for module in modules:
        here = app_of(module)
        for target, _, line in imports_of(module, modules):
            there = app_of(target)
            if here == there or module in COMPOSITION_ROOT:
                continue
            if LAYERS[there] > LAYERS[here]:
                bad.append(f"{module}:{line} imports {target} ({here} is below {there})")
            elif LAYERS[there] == LAYERS[here] and (here, there) not in SIBLING_ALLOWED:
                bad.append(f"{module}:{line} imports {target} ({here} and {there} are apps of one layer)")
    return bad


def test_no_upward_or_sideways_imports_between_apps():
    bad = upward_imports()
    assert not bad, "imports against the layers (see docs/architecture.md):\n" + "\n".join(bad)


def private_imports(modules: dict[str, Path] = MODULES) -> list[str]:
    return [f"{module}:{line} imports {name} from {target}"
            for module in modules for target, name, line in imports_of(module, modules)
            if name.startswith("_") and not name.startswith("__")]


def test_no_private_names_across_modules():
    bad = private_imports()
    assert not bad, "private names used outside their module (make them public or fold them):\n" + "\n".join(bad)


def world_imports(modules: dict[str, Path] = MODULES) -> list[str]:
    offenders = []
    for module, path in modules.items():
        for node in ast.walk(parsed(path)):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            offenders += [f"{module}:{node.lineno} imports {name}" for name in names
                          if name.split(".", 1)[0] in WORLD_PACKAGES]
    return offenders


def test_no_app_imports_the_world_stand_ins():
    """The BMC and exporter simulators play the world: Fleet's own code must never depend on them."""
    assert world_imports() == []


# --- The checks catch what they look for: faults planted in temporary modules ---------------------------------

def plant(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    """The project's modules plus ``files`` (module name -> source) written as temporary modules."""
    planted = {}
    for module, source in files.items():
        path = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        planted[module] = path
    return {**MODULES, **planted}


def test_a_planted_upward_import_is_flagged(tmp_path):
    modules = plant(tmp_path, {"inventory.planted_upward": "from firmware.models import Rollout\n",
                               "firmware.planted_sideways": "def f():\n    from decommission import models\n"})
    bad = upward_imports(modules)
    assert any(b.startswith("inventory.planted_upward:1 imports firmware.models (inventory is below firmware)")
               for b in bad), bad
    assert any(b.startswith("firmware.planted_sideways:2 imports decommission.models") for b in bad), bad
    assert len(bad) == 2, bad


def test_a_planted_import_circle_is_flagged(tmp_path):
    modules = plant(tmp_path, {"inventory.planted_a": "from inventory import planted_b\n",
                               "inventory.planted_b": "import inventory.planted_c\n",
                               "inventory.planted_c": "from inventory.planted_a import thing\n"})
    assert circles(import_graph(modules)) == [["inventory.planted_a", "inventory.planted_b", "inventory.planted_c"]]


def test_a_planted_private_import_is_flagged(tmp_path):
    modules = plant(tmp_path, {"inventory.planted_private": "from inventory.lifecycle import _hidden\n"})
    assert private_imports(modules) == ["inventory.planted_private:1 imports _hidden from inventory.lifecycle"]


def test_a_planted_import_of_the_world_is_flagged(tmp_path):
    modules = plant(tmp_path, {"procurement.planted_world": "import world.bmc\n",
                               "fleet.planted_world": "from world.bmc import decommission\n"})
    assert sorted(world_imports(modules)) == ["fleet.planted_world:1 imports world.bmc",
                                              "procurement.planted_world:1 imports world.bmc"]
