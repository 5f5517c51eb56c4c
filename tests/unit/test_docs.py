"""The README and every page under ``docs/`` are true to the code: each code block is one test.

- ``python``: the block runs **on its own** (a fresh namespace: its own imports, no names from another
  block), inside a DAG so operators attach to it; the provider names it imports are public (in their
  package's ``__all__``). A block guarded by ``if __name__ == "__main__":`` builds without running.
- ``bash`` (and ``sh``/``shell``/``console``): every command is checked: ``make`` targets exist,
  ``python -m`` modules exist, ``airflow-ray`` commands parse with the CLI's own parser (a synopsis line:
  every flag it names exists), ``airflow`` commands parse with Airflow's, an ``AIRFLOW_CONN_*`` export is
  a connection of this provider's types; a few external tools (docker, ray, kubectl, ...) are only named.
- ``yaml``: it parses; a RBAC Role is the one the code grants (``kuberay.role_manifest``).
- ``json``: it parses; a price table is one the usage record accepts (``launch.usage.parse_prices``).
- ``text`` or untagged: the commands among its lines are checked as above (the rest is a diagram); a
  package map names only paths that exist.

Plus: every relative link (and its ``#anchor``) resolves, and ``docs/index.md`` names every page.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: A fenced block, indented or not (a block inside a list item is indented with its item).
FENCE = re.compile(r"^(?P<indent> *)```(?P<lang>\w*)\n(?P<body>.*?)^(?P=indent)```", re.M | re.S)
SHELL = {"bash", "sh", "shell", "console"}
#: Tools outside this project that the docs name; their flags are theirs to check.
EXTERNAL = {"docker", "docker-compose", "ray", "kubectl", "helm", "pip", "git", "openssl", "uv", "curl"}
#: Modules that exist only inside a Ray job, by the provider module they are shipped from.
INSIDE_A_JOB = {"airflow_ray_task": "airflow_ray_provider.workloads.function.driver"}
#: A line of an untagged or ``text`` block is a command when it starts with one of these.
COMMANDS = {"make", "python", "airflow-ray", "airflow", "export"} | EXTERNAL


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    body: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks(page: Path) -> list[Block]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        indent = match["indent"]
        body = "".join(
            line[len(indent) :] if line.startswith(indent) else line
            for line in match["body"].splitlines(True)
        )
        found.append(Block(page, text.count("\n", 0, match.start()) + 1, match["lang"], body))
    return found


BLOCKS = [block for page in PAGES for block in _blocks(page)]


def _params(*langs: str) -> list:
    return [pytest.param(b, id=b.where) for b in BLOCKS if b.lang in langs]


# ---------------------------------------------------------------------------------------------- python


def _check_public_imports(block: Block) -> None:
    """``from airflow_ray_provider.X import N``: ``X`` lists ``N`` in ``__all__`` (the path for users)."""
    for node in ast.walk(ast.parse(block.body)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airflow_ray_provider"):
            module = importlib.import_module(node.module or "")
            public = getattr(module, "__all__", ())
            for alias in node.names:
                assert alias.name in public, (
                    f"{block.where} imports {alias.name} from {node.module}, which does not list it in "
                    f"__all__: import it from the package that does"
                )


@pytest.mark.parametrize("block", _params("python"))
def test_python_block_runs_on_its_own(block: Block):
    from airflow.sdk import DAG

    _check_public_imports(block)
    namespace: dict[str, object] = {"__name__": "docs_block"}
    with DAG(f"docs_block_{block.line}", schedule=None):
        exec(compile(block.body, block.where, "exec"), namespace)


def _template_dags() -> dict[str, object]:
    from airflow.sdk import DAG

    built: dict[str, object] = {}
    for block in (b for b in BLOCKS if b.page.name == "templates.md" and b.lang == "python"):
        namespace: dict[str, object] = {"__name__": "docs_block"}
        with DAG(f"holder_{block.line}", schedule=None):
            exec(compile(block.body, block.where, "exec"), namespace)
        built.update({n: v for n, v in namespace.items() if isinstance(v, DAG)})
    return built


def test_the_templates_page_builds_both_templates():
    built = _template_dags()
    assert {"dag", "zone_dag"} <= set(built)
    assert built["dag"].dag_id == "nightly_model_validation" and "decide" in built["dag"].task_ids
    assert "application.train" in built["zone_dag"].task_ids


def test_documented_zone_training_task_ids_exist():
    zone_dag = _template_dags()["zone_dag"]
    text = (ROOT / "docs" / "templates.md").read_text()
    section = text[text.index("**`build_zone_training_dag(...)`**") :]
    section = section[: section.index("```python")]
    named = set(re.findall(r"`(\w+)`", section)) & {t.split(".")[-1] for t in zone_dag.task_ids}
    assert {"plan", "train", "collect_manifest", "retry_plan", "retry_failed", "result"} <= named
    assert all(t.startswith("application.") for t in zone_dag.task_ids if t.endswith(("plan", "train")))


def test_xcom_pulls_name_a_task_of_their_block():
    from airflow.sdk import DAG

    for block in _params("python"):
        block = block.values[0]
        pulled = re.findall(r"xcom_pull\('([\w.]+)'\)", block.body)
        if not pulled:
            continue
        with DAG("xcom_holder", schedule=None) as holder:
            exec(compile(block.body, block.where, "exec"), {"__name__": "docs_block"})
        for task_id in pulled:
            assert task_id in holder.task_ids, f"{block.where} pulls XCom from unknown task {task_id!r}"


# ----------------------------------------------------------------------------------------------- shell


def _make_targets() -> set[str]:
    return set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))


def _cli_flags() -> set[str]:
    """Every option string of ``airflow-ray`` and its subcommands."""
    import argparse

    from airflow_ray_provider.cli import build_parser

    flags: set[str] = set()
    parsers = [build_parser()]
    while parsers:
        parser = parsers.pop()
        for action in parser._actions:
            flags.update(s for s in action.option_strings if s.startswith("--"))
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    return flags


def _check_command(argv: list[str], where: str, line: str) -> None:
    while argv and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):  # VAR=value before the command
        argv = argv[1:]
    if not argv:
        return
    tool = argv[0]
    if tool == "export":
        name, _, value = argv[1].partition("=")
        if name.startswith("AIRFLOW_CONN_"):
            from airflow_ray_provider import get_provider_info

            types = {c["connection-type"] for c in get_provider_info()["connection-types"]}
            assert json.loads(value)["conn_type"] in types, f"{where}: {name} is not a ray/kuberay connection"
    elif tool in EXTERNAL or "docker" in line:
        if "compose" in line:
            assert (ROOT / "docker-compose.yaml").is_file()
    elif tool == "make":
        assert argv[1] in _make_targets(), f"{where} runs `make {argv[1]}`, the Makefile has no such target"
    elif tool == "python":
        if argv[1] == "-m":
            assert importlib.util.find_spec(argv[2]) is not None, f"{where} runs a missing module {argv[2]}"
        else:
            assert (ROOT / argv[1]).is_file(), f"{where} runs a missing file {argv[1]}"
    elif tool == "airflow-ray":
        if "[" in line or "|" in line:  # a synopsis: the flags it names exist
            unknown = set(re.findall(r"--[\w-]+", line)) - _cli_flags()
            assert not unknown, f"{where}: the CLI has no flags {sorted(unknown)}"
        else:
            from airflow_ray_provider.cli import build_parser

            build_parser().parse_args(argv[1:])
    elif tool == "airflow":
        from airflow.cli.cli_parser import get_parser

        get_parser().parse_args(argv[1:])
    else:
        pytest.fail(f"{where}: shell command not checked: {line}")


def _commands(block: Block, *, every_line: bool) -> list[tuple[list[str], str]]:
    found = []
    for line in block.body.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        first = stripped.split()[0]
        if not every_line and first not in COMMANDS:
            continue  # a diagram, or a synopsis' continuation line
        if first == "airflow-ray" and ("[" in stripped or "|" in stripped):
            found.append(([first], stripped))  # a synopsis: shlex cannot split `|`
            continue
        found.append((shlex.split(stripped.replace("$(", "").replace(")", ""), comments=True), stripped))
    return found


@pytest.mark.parametrize("block", _params(*SHELL))
def test_shell_block_runs_real_commands(block: Block):
    commands = _commands(block, every_line=True)
    assert commands, f"{block.where}: an empty shell block"
    for argv, line in commands:
        _check_command(argv, block.where, line)


@pytest.mark.parametrize("block", _params("", "text"))
def test_text_block_commands_and_paths_are_real(block: Block):
    for argv, line in _commands(block, every_line=False):
        _check_command(argv, block.where, line)
    if block.body.startswith("airflow_ray_provider/"):
        _check_package_map(block)


def _check_package_map(block: Block) -> None:
    """Each entry of the tree (``name/`` or ``name.py`` at an indent of two spaces a level) exists."""
    stack: list[str] = []
    for line in block.body.splitlines():
        match = re.match(r"^( *)(\S+)", line)
        if not match or len(match[1]) > 8 or not match[2].endswith(("/", ".py")):
            continue  # a description's continuation line
        depth = len(match[1]) // 2
        stack[depth:] = [match[2].rstrip("/")]
        assert (ROOT.joinpath(*stack)).exists(), (
            f"{block.where}: the package map names a missing {'/'.join(stack)}"
        )


def test_inline_commands_name_real_targets_and_modules():
    targets = _make_targets()
    for page in PAGES:
        text = page.read_text()
        for module in re.findall(r"`python -m ([\w.]+)(?![\w.<])[^`]*`", text):
            module = INSIDE_A_JOB.get(module, module)
            assert importlib.util.find_spec(module) is not None, (
                f"{page.name} names a missing module {module}"
            )
        for target in re.findall(r"`make ([\w-]+)[^`]*`", text):
            assert target in targets, f"{page.name} names `make {target}`, the Makefile has no such target"


# ----------------------------------------------------------------------------------------- yaml, json


@pytest.mark.parametrize("block", _params("yaml", "yml"))
def test_yaml_block_parses(block: Block):
    import yaml

    documents = [d for d in yaml.safe_load_all(block.body) if d is not None]
    assert documents, f"{block.where}: an empty YAML block"
    for document in documents:
        if isinstance(document, dict) and document.get("kind") == "Role":
            from airflow_ray_provider.kuberay import role_manifest

            expected = role_manifest(document["metadata"]["namespace"], name=document["metadata"]["name"])
            assert document == expected, f"{block.where}: the Role differs from kuberay.role_manifest()"


@pytest.mark.parametrize("block", _params("json"))
def test_json_block_parses(block: Block):
    document = json.loads(block.body)
    if isinstance(document, dict) and ("currency" in document or "groups" in document):
        from airflow_ray_provider.launch.usage import parse_prices

        parse_prices(document)  # raises, naming the field, on a table the record would refuse


def test_every_block_is_tested():
    tested = SHELL | {"python", "yaml", "yml", "json", "", "text"}
    untested = [b.where for b in BLOCKS if b.lang not in tested]
    assert not untested, f"code blocks in a language no test checks: {untested}"
    assert len([b for b in BLOCKS if b.lang == "python"]) >= 10


# ----------------------------------------------------------------------------------------------- links


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def test_relative_links_and_anchors_resolve():
    for page in PAGES:
        text = FENCE.sub("", page.read_text())
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"\w+://", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            assert linked.exists(), f"{page.name} links to a missing {target}"
            if anchor and linked.suffix == ".md":
                assert anchor in _anchors(linked), f"{page.name} links to a missing anchor {target}"


def test_the_docs_index_names_every_page():
    index = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w\-./]+\.md)", index))
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")} - {"index.md"}
    assert pages <= linked, f"docs/index.md does not list {sorted(pages - linked)}"
