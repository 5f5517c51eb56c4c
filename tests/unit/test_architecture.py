"""The architecture, checked from the source: package boundaries, import cycles, layers, public names.

Every module of ``airflow_ray_provider/`` and every shipped DAG in ``dags/`` is parsed with :mod:`ast`;
nothing is imported, so a broken or heavy module cannot hide a violation. Each import is recorded with
where it runs: at **module level** (when the importer is imported; class bodies included), inside a
**function** (lazily, when called) or under ``if TYPE_CHECKING:`` (never at run time). The rules are
the layer table of ``docs/architecture.md`` (imports point downward only) and the style guide (``__all__``
in every package; nothing imports another package's private module). Each failure lists the offending imports
with file and line.
"""

from __future__ import annotations

import ast
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "airflow_ray_provider"
#: Libraries a DAG file must not load while it is parsed (the scheduler parses DAG files all day).
HEAVY = ("ray", "kubernetes", "pandas", "pyarrow", "numpy", "sklearn")


@dataclass(frozen=True)
class Module:
    """One parsed source file: its dotted name (``dags.<file>`` for a shipped DAG) and syntax tree."""

    name: str
    where: str
    is_package: bool
    tree: ast.Module


@dataclass(frozen=True)
class Import:
    """One import, resolved to an absolute dotted name.

    ``target`` is the deepest module of this project the statement names (``from pkg import submodule``
    imports ``pkg.submodule``; ``from pkg import name`` imports ``pkg``), or the external module as
    written (``airflow.sdk``).
    """

    importer: str
    target: str
    where: str
    module_level: bool
    type_checking: bool

    @property
    def at_import_time(self) -> bool:
        """Whether it runs when the importer is imported (module level and not type-only)."""
        return self.module_level and not self.type_checking

    def __str__(self) -> str:
        return f"{self.importer} -> {self.target} ({self.where})"


def parse_tree(root: Path) -> dict[str, Module]:
    """Every module of the package and every shipped DAG file under ``root``, parsed."""
    paths = sorted((root / PACKAGE).rglob("*.py")) + sorted((root / "dags").glob("*.py"))
    sources = {}
    for path in paths:
        parts = list(path.relative_to(root).with_suffix("").parts)
        sources[str(path.relative_to(root))] = (parts, path.read_text())
    return parse_sources(sources)


def parse_sources(sources: dict[str, tuple[list[str], str]]) -> dict[str, Module]:
    """Parse ``{file: (path parts without suffix, source)}``; ``__init__`` files name their package."""
    modules = {}
    for where, (parts, source) in sources.items():
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        modules[name] = Module(name, where, is_package, ast.parse(source, filename=where))
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _ImportCollector(ast.NodeVisitor):
    """Every import statement of one module, with where it runs."""

    def __init__(self, module: Module, known: set[str]) -> None:
        self.module = module
        self.known = known
        self.function_depth = 0
        self.type_checking_depth = 0
        self.found: dict[tuple[str, int], Import] = {}

    def _add(self, target: str, node: ast.stmt) -> None:
        where = f"{self.module.where}:{node.lineno}"
        self.found[(target, node.lineno)] = Import(
            self.module.name, target, where, self.function_depth == 0, self.type_checking_depth > 0
        )

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.function_depth += 1
        self.generic_visit(node)
        self.function_depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        if not _is_type_checking(node.test):
            self.generic_visit(node)
            return
        self.type_checking_depth += 1
        for child in node.body:
            self.visit(child)
        self.type_checking_depth -= 1
        for child in node.orelse:  # the ``else`` of ``if TYPE_CHECKING:`` is what runs
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self._absolute(node)
        if base == "__future__":
            return
        for alias in node.names:
            candidate = f"{base}.{alias.name}"
            self._add(candidate if candidate in self.known else base, node)

    def _absolute(self, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        package = self.module.name.split(".")
        if not self.module.is_package:
            package.pop()
        package = package[: len(package) - (node.level - 1)]
        return ".".join([*package, *([node.module] if node.module else [])])


def collect_imports(modules: dict[str, Module]) -> list[Import]:
    """Every import of every module (one entry per imported module and line)."""
    found: list[Import] = []
    for module in modules.values():
        collector = _ImportCollector(module, set(modules))
        collector.visit(module.tree)
        found += collector.found.values()
    return found


def _within(name: str, prefix: str) -> bool:
    """``name`` is ``prefix`` or inside it (on dots: ``airflow`` does not cover ``airflow_ray_provider``)."""
    return name == prefix or name.startswith(prefix + ".")


def _listing(title: str, lines: Iterable[object]) -> str:
    return title + "\n" + "\n".join(f"  {line}" for line in lines)


# --- boundaries --------------------------------------------------------------------------------------


def _private_owner(name: str) -> str | None:
    """The package that owns a private module (``pkg._x`` and everything below it), else ``None``."""
    parts = name.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def private_module_imports(modules: dict[str, Module], imports: Iterable[Import]) -> list[Import]:
    """Imports of a project module named ``_x`` (or below one) from outside the package that owns it."""
    offenders = []
    for imp in imports:
        owner = _private_owner(imp.target) if imp.target in modules else None
        if owner is not None and not _within(imp.importer, owner):
            offenders.append(imp)
    return offenders


def packages_without_all(modules: dict[str, Module]) -> tuple[list[str], list[str]]:
    """Packages whose ``__init__`` has no ``__all__``, and ``__all__`` names the package never binds."""
    missing, unbound = [], []
    for module in modules.values():
        if not module.is_package:
            continue
        names = _dunder_all(module.tree)
        if names is None:
            missing.append(module.where)
            continue
        bound = _bound_names(module.tree)
        unbound += [f"{module.where}: {name!r}" for name in names if name not in bound]
    return missing, unbound


def _dunder_all(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            if not isinstance(value, (ast.List, ast.Tuple)):
                return ["<__all__ is not a literal list of names>"]
            return [e.value if isinstance(e, ast.Constant) else ast.unparse(e) for e in value.elts]
    return None


def _bound_names(tree: ast.Module) -> set[str]:
    """Names a module binds at its top level; a lazy module (PEP 562 ``__getattr__``) also binds what it
    imports under ``if TYPE_CHECKING:`` (its ``__getattr__`` loads those on first use)."""
    bound: set[str] = set()
    lazy = any(isinstance(n, ast.FunctionDef) and n.name == "__getattr__" for n in tree.body)
    body = list(tree.body)
    if lazy:
        body += [
            inner
            for node in tree.body
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in node.body
        ]
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Assign):
            bound |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.add(node.target.id)
    return bound


# --- cycles ------------------------------------------------------------------------------------------


def import_cycles(modules: dict[str, Module], imports: Iterable[Import]) -> list[str]:
    """One shortest cycle through each group of modules that import each other, with file and line.

    Only explicit imports are edges: importing ``pkg.mod`` also runs ``pkg/__init__.py``, but a package
    that re-exports its own submodules is not a cycle (Python finishes the package first).
    """
    edges: dict[str, dict[str, Import]] = {name: {} for name in modules}
    for imp in imports:
        if imp.target in modules and imp.target != imp.importer:
            edges[imp.importer].setdefault(imp.target, imp)
    graph = {name: set(targets) for name, targets in edges.items()}
    found = []
    for component in _components(graph):
        if len(component) > 1:
            cycle = _shortest_cycle(graph, min(component), component)
            steps = [str(edges[a][b]) for a, b in pairwise(cycle)]
            found.append(" -> ".join(cycle) + "".join(f"\n    {step}" for step in steps))
    return sorted(found)


def _components(graph: dict[str, set[str]]) -> Iterator[set[str]]:
    """Tarjan's strongly connected components (iterative: no recursion limit)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for root in sorted(graph):
        if root in index:
            continue
        enter(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    enter(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = {stack.pop()}
                while node not in component:
                    component.add(stack.pop())
                on_stack -= component
                yield component


def _shortest_cycle(graph: dict[str, set[str]], start: str, component: set[str]) -> list[str]:
    paths = {start: [start]}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & component):
            if child == start:
                return [*paths[node], start]
            if child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")


# --- layers ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerRule:
    """Modules in ``importers`` never import anything in ``forbidden`` (``except_`` excepted).

    :param at_import_time_only: only imports that run when the importer is imported count (lazy and
        type-only imports are allowed); otherwise every import counts, type-only ones included.
    """

    why: str
    importers: tuple[str, ...]
    forbidden: tuple[str, ...]
    at_import_time_only: bool = False
    except_: tuple[str, ...] = ()

    def violations(self, imports: Iterable[Import]) -> list[Import]:
        found = []
        for imp in imports:
            if self.at_import_time_only and not imp.at_import_time:
                continue
            if (
                any(_within(imp.importer, p) for p in self.importers)
                and any(_within(imp.target, f) for f in self.forbidden)
                and not any(_within(imp.target, e) for e in self.except_)
            ):
                found.append(imp)
        return found


def _pkg(*subpackages: str) -> tuple[str, ...]:
    return tuple(f"{PACKAGE}.{sub}" for sub in subpackages)


DAG_LAYER = ("dags", *_pkg("templates"))
LAYER_RULES = [
    LayerRule(
        "code inside Ray jobs and the client layers never import Airflow",
        _pkg("workloads", "kuberay", "local"),
        ("airflow",),
    ),
    LayerRule("jobs/ (rules and the Job API client) never imports Airflow", _pkg("jobs"), ("airflow",)),
    LayerRule(
        "jobs/ imports no Ray when it is imported (the client loads Ray's own on first use)",
        _pkg("jobs"),
        ("ray",),
        at_import_time_only=True,
    ),
    LayerRule(
        "launch/ (the run lifecycle) never imports Airflow, nor the Airflow face above it",
        _pkg("launch"),
        ("airflow", *_pkg("operators", "sensors", "triggers", "hooks", "decorators", "templates")),
    ),
    LayerRule(
        "the CLI imports no Airflow when it is imported (connections are optional)",
        _pkg("cli"),
        ("airflow", *_pkg("operators", "sensors", "triggers", "hooks", "decorators", "templates")),
        at_import_time_only=True,
    ),
    LayerRule(
        "the evaluation workload never imports the zone-training workload",
        _pkg("workloads.evaluation"),
        _pkg("workloads.zone_training"),
    ),
    LayerRule(
        "the zone-training workload never imports the evaluation workload",
        _pkg("workloads.zone_training"),
        _pkg("workloads.evaluation"),
    ),
    LayerRule(
        "DAG files and templates never import Ray or Kubernetes at module level",
        DAG_LAYER,
        ("ray", "kubernetes"),
        at_import_time_only=True,
    ),
    LayerRule(
        "workloads/ runs inside Ray jobs: it imports nothing of the provider outside workloads/",
        _pkg("workloads"),
        (PACKAGE,),
        except_=_pkg("workloads"),
    ),
    LayerRule(
        "the client layers kuberay/ and local/ never import a layer above them",
        _pkg("kuberay", "local"),
        _pkg("clusters", "hooks", "operators", "sensors", "triggers", "decorators", "templates", "jobs"),
    ),
    LayerRule(
        "only DAG files and the demo import the DAG templates",
        _pkg(
            "clusters",
            "hooks",
            "jobs",
            "kuberay",
            "launch",
            "local",
            "operators",
            "sensors",
            "triggers",
            "workloads",
        ),
        _pkg("templates"),
    ),
]


def _with_parents(name: str, modules: dict[str, Module]) -> list[str]:
    """``name`` and the packages above it that are project modules (outermost first)."""
    parts = name.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1) if ".".join(parts[:n]) in modules]


def import_time_closure(modules: dict[str, Module], imports: Iterable[Import], start: str) -> list[Import]:
    """The external imports that run when ``start`` is imported, following project modules transitively.

    Importing ``pkg.mod`` runs ``pkg/__init__.py`` first, so parent packages are followed too.
    """
    by_importer: dict[str, list[Import]] = {}
    for imp in imports:
        if imp.at_import_time:
            by_importer.setdefault(imp.importer, []).append(imp)
    todo = _with_parents(start, modules)
    seen: set[str] = set(todo)
    external: list[Import] = []
    while todo:
        for imp in by_importer.get(todo.pop(), ()):
            project = _with_parents(imp.target, modules)
            if not project:
                external.append(imp)
            for name in project:
                if name not in seen:
                    seen.add(name)
                    todo.append(name)
    return external


# --- the checks on this repository --------------------------------------------------------------------

MODULES = parse_tree(REPO_ROOT)
IMPORTS = collect_imports(MODULES)


def test_no_module_imports_another_packages_private_module() -> None:
    offenders = private_module_imports(MODULES, IMPORTS)
    assert not offenders, _listing("private modules (`_x`) imported from outside their package:", offenders)


def test_every_package_states_its_public_names() -> None:
    missing, unbound = packages_without_all(MODULES)
    assert not missing, _listing("packages whose __init__.py defines no __all__:", missing)
    assert not unbound, _listing("__all__ names the package neither defines nor imports:", unbound)


def test_no_import_cycles_at_module_level() -> None:
    cycles = import_cycles(MODULES, [i for i in IMPORTS if i.at_import_time])
    assert not cycles, _listing("module-level import cycles:", cycles)


def test_no_import_cycles_through_function_level_imports() -> None:
    """A lazy import cannot fail at import time, but a cycle through one still knots two modules."""
    cycles = import_cycles(MODULES, [i for i in IMPORTS if not i.type_checking])
    assert not cycles, _listing("import cycles (imports inside functions included):", cycles)


@pytest.mark.parametrize("rule", LAYER_RULES, ids=lambda rule: rule.why)
def test_layer_rule(rule: LayerRule) -> None:
    offenders = rule.violations(IMPORTS)
    assert not offenders, _listing(f"{rule.why}; offending imports:", offenders)


@pytest.mark.parametrize("start", [m for m in MODULES if any(_within(m, p) for p in DAG_LAYER)])
def test_parsing_dag_files_and_templates_loads_no_heavy_library(start: str) -> None:
    """What a DAG file pulls in at import time, through every provider module on the way."""
    loaded = import_time_closure(MODULES, IMPORTS, start)
    heavy = [i for i in loaded if any(_within(i.target, h) for h in HEAVY)]
    assert not heavy, _listing(f"importing {start} loads a heavy library:", heavy)


def test_the_checks_see_the_whole_repository() -> None:
    """Guards the checks above against passing on nothing."""
    packages = {name for name, module in MODULES.items() if module.is_package}
    assert set(_pkg("workloads", "kuberay", "local", "jobs", "launch", "templates", "operators")) <= packages
    assert {"dags.nightly_model_validation", "dags.zone_training"} <= set(MODULES)
    assert any(i.target.startswith("airflow.") for i in IMPORTS)
    assert any(not i.module_level for i in IMPORTS) and any(i.type_checking for i in IMPORTS)


# --- the checker itself, on small made-up packages ----------------------------------------------------


def _fake(files: dict[str, str]) -> tuple[dict[str, Module], list[Import]]:
    sources = {path: (path.removesuffix(".py").split("/"), source) for path, source in files.items()}
    modules = parse_sources(sources)
    return modules, collect_imports(modules)


def test_checker_finds_cycles_private_imports_and_layer_breaks() -> None:
    modules, imports = _fake(
        {
            "app/__init__.py": "from app.a import A\n__all__ = ['A', 'B']\n",
            "app/a.py": "from . import b\nA = 1\n",
            "app/b.py": "def f():\n    from app.a import A\n",
            "app/_secret.py": "",
            "app/jobs/__init__.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray\n",
            "app/jobs/rule.py": "import airflow_extras\nfrom ..a import A\n",
            "other/__init__.py": "from app import _secret\n__all__ = []\n",
        }
    )
    assert import_cycles(modules, [i for i in imports if i.at_import_time]) == []
    (cycle,) = import_cycles(modules, imports)
    assert cycle.startswith("app.a -> app.b -> app.a") and "app/b.py:2" in cycle
    assert [str(i) for i in private_module_imports(modules, imports)] == [
        "other -> app._secret (other/__init__.py:1)"
    ]
    assert packages_without_all(modules) == (["app/jobs/__init__.py"], ["app/__init__.py: 'B'"])
    rule = LayerRule("pure", ("app.jobs",), ("airflow", "ray", "app.a"))
    assert sorted(str(i) for i in rule.violations(imports)) == [
        "app.jobs -> ray (app/jobs/__init__.py:3)",  # type-only imports count for "never imports"
        "app.jobs.rule -> app.a (app/jobs/rule.py:2)",  # relative import resolved
    ]  # ``airflow_extras`` is not ``airflow``
    lazy_ok = LayerRule("light", ("app.jobs",), ("ray",), at_import_time_only=True)
    assert lazy_ok.violations(imports) == []
    loaded = import_time_closure(modules, imports, "app.jobs.rule")  # parents run first; type-only never
    assert sorted(i.target for i in loaded) == ["airflow_extras", "typing"]


def test_a_lazy_package_binds_what_it_imports_for_type_checking_only() -> None:
    lazy = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lazy.m import A\n__all__ = ['A']\n"
    eager_only = lazy.replace("__all__", "X = 1\n__all__")
    modules, _ = _fake(
        {
            "lazy/__init__.py": lazy + "def __getattr__(name):\n    return name\n",
            "lazy/m.py": "A = 1\n",
            "plain/__init__.py": eager_only.replace("lazy.m", "plain.m"),
            "plain/m.py": "A = 1\n",
        }
    )
    assert packages_without_all(modules) == ([], ["plain/__init__.py: 'A'"])
