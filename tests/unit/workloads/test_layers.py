"""The workloads' import rules, read from the source: what runs inside Ray jobs stays apart.

No Airflow anywhere under ``workloads/``; evaluation and zone training never import each other; no
module imports another package's private (``_x``) module or name; the workloads' own modules form no
import cycle; and each package's ``__all__`` names what it really exports.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import airflow_ray_provider.workloads as workloads_pkg

pytestmark = pytest.mark.unit

ROOT = Path(workloads_pkg.__file__).parent
PREFIX = "airflow_ray_provider.workloads"
PACKAGES = ("common", "evaluation", "zone_training", "samples")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join((PREFIX, *parts)).removesuffix(".__init__")


def _imports(nodes: list[ast.stmt] | ast.Module) -> list[tuple[str, list[str]]]:
    """(module, imported names) of the import statements in ``nodes`` and everything below them."""
    found: list[tuple[str, list[str]]] = []
    for root in nodes if isinstance(nodes, list) else [nodes]:
        for node in ast.walk(root):
            if isinstance(node, ast.Import):
                found += [(alias.name, []) for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.append((node.module, [alias.name for alias in node.names]))
    return found


def _import_time_statements(tree: ast.Module) -> list[ast.stmt]:
    """Top-level statements that run at import (``if TYPE_CHECKING:`` blocks and functions do not)."""
    kept: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            kept += node.orelse
            continue
        kept.append(node)
    return kept


TREES = {_module_name(p): ast.parse(p.read_text()) for p in sorted(ROOT.rglob("*.py"))}
#: Every import, lazy ones inside functions included.
SOURCES = {mod: _imports(tree) for mod, tree in TREES.items()}
#: The imports that run when the module is imported.
AT_IMPORT = {mod: _imports(_import_time_statements(tree)) for mod, tree in TREES.items()}


def _package(module: str) -> str | None:
    rest = module.removeprefix(PREFIX + ".").split(".")
    return rest[0] if module.startswith(PREFIX + ".") and rest[0] in PACKAGES else None


def test_no_airflow_import() -> None:
    offenders = [
        (mod, imported)
        for mod, imports in SOURCES.items()
        for imported, _ in imports
        if imported == "airflow" or imported.startswith("airflow.")
    ]
    assert offenders == []


def test_applications_never_import_each_other_and_samples_stay_a_leaf() -> None:
    allowed = {
        "common": {"common"},
        "evaluation": {"common", "evaluation"},
        "zone_training": {"common", "zone_training"},
        "samples": {"common", "samples"},
    }
    offenders = [
        (mod, imported)
        for mod, imports in SOURCES.items()
        if (own := _package(mod))
        for imported, _ in imports
        if (target := _package(imported)) and target not in allowed[own]
    ]
    assert offenders == []


def test_nothing_private_is_imported_across_packages() -> None:
    offenders = []
    for mod, imports in SOURCES.items():
        for imported, names in imports:
            if not imported.startswith(PREFIX) or _package(imported) == _package(mod):
                continue
            private = [n for n in names if n.startswith("_")]
            if private or any(part.startswith("_") for part in imported.split(".")):
                offenders.append((mod, imported, private))
    assert offenders == []


def test_no_import_cycles_among_the_workload_modules() -> None:
    """At import time: a module importing its own parent package is not an edge (it is loaded first)."""

    def edges(mod: str) -> set[str]:
        targets = set()
        for imported, names in AT_IMPORT[mod]:
            targets |= {imported, *(f"{imported}.{name}" for name in names)}
        return {t for t in targets & set(SOURCES) if t != mod and not mod.startswith(t + ".")}

    graph = {mod: edges(mod) for mod in SOURCES}
    visiting: list[str] = []
    done: set[str] = set()

    def visit(node: str) -> None:
        if node in done:
            return
        assert node not in visiting, f"import cycle: {' -> '.join([*visiting[visiting.index(node) :], node])}"
        visiting.append(node)
        for nxt in sorted(graph[node]):
            visit(nxt)
        visiting.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)
    assert graph[f"{PREFIX}.evaluation"], "the graph is built (the package imports its run module)"


@pytest.mark.parametrize("package", PACKAGES)
def test_all_names_exist(package: str) -> None:
    module = importlib.import_module(f"{PREFIX}.{package}")
    assert module.__all__ and all(hasattr(module, name) for name in module.__all__)


def test_the_evaluation_config_sits_below_its_engine_and_the_names_module_imports_nothing() -> None:
    """config.py imported engine.py (the layer above it) for the engine names; both read names.py now."""
    config_imports = {imported for imported, _ in SOURCES[f"{PREFIX}.evaluation.config"]}
    assert f"{PREFIX}.evaluation.engine" not in config_imports
    assert f"{PREFIX}.evaluation.names" in config_imports
    names_imports = {imported.split(".")[0] for imported, _ in SOURCES[f"{PREFIX}.evaluation.names"]}
    assert names_imports <= {"__future__", "collections"}, names_imports
