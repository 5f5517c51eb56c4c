"""docs/launch.md is true to the code: each Python block runs on its own, the CLI synopsis parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

DOC = (Path(__file__).parents[3] / "docs" / "launch.md").read_text()
BLOCKS = re.findall(r"```(\w*)\n(.*?)```", DOC, flags=re.S)


@pytest.mark.parametrize("block", [b for lang, b in BLOCKS if lang == "python"])
def test_each_python_block_runs_on_its_own(block: str):
    exec(compile(block, "docs/launch.md", "exec"), {})


def test_each_airflow_ray_command_of_the_doc_parses():
    from airflow_ray_provider.cli import build_parser

    commands = [
        line.split("#")[0].strip()
        for lang, block in BLOCKS
        if lang == ""
        for line in block.splitlines()
        if line.startswith("airflow-ray ") and "[" not in line and "|" not in line
    ]
    assert commands, "the doc shows no airflow-ray command"
    for command in commands:
        build_parser().parse_args(shlex.split(command)[1:])
