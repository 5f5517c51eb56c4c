"""``docs/task_ray.md`` shows the shipped example DAG as it is (between its ``[START]``/``[END]`` markers),
below the few lines that make the block run on its own (``tests/unit/test_docs.py`` runs it)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def test_the_docs_example_is_the_shipped_dag():
    dag = (REPO / "dags" / "ray_taskflow.py").read_text()
    section = re.search(r"# \[START ray_taskflow\]\n(.*?)\n\s*# \[END ray_taskflow\]", dag, re.S)
    assert section is not None
    docs = (REPO / "docs" / "task_ray.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", docs, re.S)

    def normal(code: str) -> str:  # ruff formats the docs' top-level block with two blank lines
        return re.sub(r"\n{3,}", "\n\n", code.strip())

    assert any(normal(textwrap.dedent(section.group(1))) in normal(block) for block in blocks)
