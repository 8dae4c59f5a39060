"""The house's structure, checked over every project module's imports (docs/architecture.md).

Parses the source (``ast``: module-level and function-level imports alike, ``TYPE_CHECKING`` blocks too) of
every module of the apps, and fails on

- an import circle between modules,
- an upward import between apps (layers: fleet < inventory < telemetry, firmware, procurement, decommission)
  or an import between two apps of the top layer that ``SIBLING_ALLOWED`` does not list,
- a private name (leading underscore) imported from another module.

No database: the check reads files.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP_PACKAGES = ("fleet", "inventory", "telemetry", "firmware", "procurement", "decommission")
# Stand-ins for the outside world (BMC simulator, dcgm-exporter simulator): tests, benchmarks and the demo's
# Procfile use them; no app imports them.
WORLD_PACKAGES = ("world",)

# Each app's layer; an app may import its own layer's modules and lower layers only.
LAYERS = {"fleet": 0, "inventory": 1, "telemetry": 2, "firmware": 2, "procurement": 2, "decommission": 2}

# Imports between apps of the top layer that are allowed, each with its reason. Keep it short.
SIBLING_ALLOWED: dict[tuple[str, str], str] = {
    ("procurement", "telemetry"): "RMA cases and refresh planning read a GPU's health flags (selectors only)",
}

# The project package's composition root: settings, URL roots, the Celery app and the demo bootstrap put the
# apps together, so they import every app. Nothing else in fleet/ may import an app.
COMPOSITION_ROOT = {
    "fleet.settings", "fleet.urls", "fleet.api_urls", "fleet.web_urls", "fleet.celery", "fleet.wsgi", "fleet.asgi",
    "fleet.management.commands.bootstrap",
}

def app_of(module: str) -> str:
    return module.split(".", 1)[0]


def project_modules() -> dict[str, Path]:
    modules = {}
    for package in APP_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "migrations" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


MODULES = project_modules()


def _known(name: str) -> str | None:
    """The project module ``name`` is, or is in (``inventory.models.Gpu`` -> ``inventory.models``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> list[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every project import in ``module``."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _known(alias.name)
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
                if submodule in MODULES:  # ``from inventory import selectors``: the module itself
                    found.append((submodule, "", node.lineno))
                elif target := _known(source):
                    found.append((target, alias.name, node.lineno))
    return found


GRAPH = {module: sorted({target for target, _, _ in imports_of(module)} - {module}) for module in MODULES}


def circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in GRAPH:
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, i = work.pop()
            if i == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            edges = GRAPH[node]
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


def upward_imports() -> list[str]:
    bad = []
    for module in MODULES:
        here = app_of(module)
        for target, _, line in imports_of(module):
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


def test_no_private_names_across_modules():
    bad = [f"{module}:{line} imports {name} from {target}"
           for module in MODULES for target, name, line in imports_of(module)
           if name.startswith("_") and not name.startswith("__")]
    assert not bad, "private names used outside their module (make them public or fold them):\n" + "\n".join(bad)


@pytest.mark.parametrize(("module", "target"), [("inventory.models", "firmware.models"),
                                                  ("firmware.models", "telemetry.models")])
def test_the_layer_rule_would_catch_an_upward_import(module, target):
    here, there = app_of(module), app_of(target)
    assert LAYERS[there] > LAYERS[here] or (LAYERS[there] == LAYERS[here] and (here, there) not in SIBLING_ALLOWED)


def test_no_app_imports_the_world_stand_ins():
    """The BMC and exporter simulators play the world: Fleet's own code must never depend on them."""
    offenders = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            offenders += [f"{module}:{node.lineno} imports {name}" for name in names
                          if name.split(".", 1)[0] in WORLD_PACKAGES]
    assert offenders == []
