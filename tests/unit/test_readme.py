"""README.md's code runs: every Python block builds (imports resolve, operators and DAGs construct), and
every shell command meant to run locally names a real make target, module or file."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in BLOCK.findall(README) if lang == language]


@pytest.mark.unit
def test_every_python_block_builds_in_readme_order():
    """Blocks run top to bottom in one namespace (a later block may use an earlier block's ``create``),
    inside a DAG so operators attach to it; a name used without an import fails here."""
    from airflow.sdk import DAG

    blocks = _blocks("python")
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "readme_snippets"}
    with DAG("readme_snippets", schedule=None) as snippets:
        for number, block in enumerate(blocks, 1):
            exec(compile(block, f"README.md python block {number}", "exec"), namespace)
    built = {n: v for n, v in namespace.items() if isinstance(v, DAG)}
    assert {"dag", "zone_dag"} <= set(built)
    assert built["dag"].dag_id == "nightly_model_validation" and "decide" in built["dag"].task_ids
    assert "application.train" in built["zone_dag"].task_ids
    for pulled in re.findall(r"xcom_pull\('([\w.]+)'\)", "\n".join(blocks)):
        assert pulled in snippets.task_ids, f"a README snippet pulls XCom from unknown task {pulled!r}"


@pytest.mark.unit
def test_documented_zone_training_task_ids_exist():
    from airflow.sdk import DAG

    namespace: dict[str, object] = {}
    with DAG("holder", schedule=None):
        exec(compile(_blocks("python")[-1], "zone block", "exec"), namespace)
    zone_dag = namespace["zone_dag"]
    assert isinstance(zone_dag, DAG)
    section = README[README.index("**`build_zone_training_dag(...)`**") :]
    section = section[: section.index("```python")]
    named = set(re.findall(r"`(\w+)`", section)) & {t.split(".")[-1] for t in zone_dag.task_ids}
    assert {"plan", "train", "collect_manifest", "retry_plan", "retry_failed", "result"} <= named
    assert all(t.startswith("application.") for t in zone_dag.task_ids if t.endswith(("plan", "train")))


def _local_commands() -> list[list[str]]:
    """Shell commands of the README meant for this machine (not docker compose, not exports)."""
    commands = []
    for block in _blocks("bash"):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if not line or line.startswith("export ") or "docker" in line:
                continue
            commands.append(shlex.split(line.replace("|", " ")))
    inline = [c for c in re.findall(r"`(python -m [^`]+)`", README) if "<" not in c]  # not placeholders
    return commands + [shlex.split(c) for c in inline]


@pytest.mark.unit
def test_shell_commands_name_real_make_targets_and_modules():
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M))
    commands = _local_commands()
    assert commands
    for argv in commands:
        if argv[0] == "make":
            assert argv[1] in targets, f"README runs `make {argv[1]}`, the Makefile has no such target"
        elif argv[:2] == ["python", "-m"]:
            assert importlib.util.find_spec(argv[2]) is not None, f"README runs a missing module {argv[2]}"
        else:
            pytest.fail(f"README shell command not checked: {shlex.join(argv)}")
