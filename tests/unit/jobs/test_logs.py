"""Log streaming by offset: every line exactly once, in order, whatever the poll timing."""

from __future__ import annotations

import random

import pytest

from airflow_ray_provider.jobs.outcome import tail
from airflow_ray_provider.launch.run import new_log_lines

pytestmark = pytest.mark.unit


def test_complete_lines_only_until_final():
    lines, offset = new_log_lines("a\nb\npart", 0)
    assert lines == ["a", "b"] and offset == 4
    lines, offset = new_log_lines("a\nb\npartial\nc", offset)
    assert lines == ["partial"]
    lines, offset = new_log_lines("a\nb\npartial\nc", offset, final=True)
    assert lines == ["c"] and offset == len("a\nb\npartial\nc")
    assert new_log_lines("a\nb\npartial\nc", offset, final=True) == ([], offset)


def test_blank_lines_are_kept():
    assert new_log_lines("\n\nx\n", 0)[0] == ["", "", "x"]


def test_random_polls_and_resumes_emit_each_line_once():
    rng = random.Random(7)
    full = "".join(f"line {i} {'x' * rng.randint(0, 30)}\n" for i in range(300)) + "tail-no-newline"
    emitted, offset, seen = [], 0, 0
    while seen < len(full):
        seen = min(len(full), seen + rng.randint(1, 400))
        # A deferral hands over only the integer offset: resume from it as a new poller would.
        lines, offset = new_log_lines(full[:seen], int(offset), final=seen == len(full))
        emitted += lines
    assert emitted == full.splitlines()


def test_offset_past_a_shrunk_log_does_not_replay_it():
    lines, offset = new_log_lines("new\n", 100)
    assert lines == [] and offset == 4


def test_tail():
    text = "\n".join(str(i) for i in range(100))
    assert tail(text, 3) == "97\n98\n99"
    assert tail(text, 0) == "" and tail("", 5) == ""


def test_a_reattached_try_resumes_at_the_last_lines_not_the_start():
    """A re-attached try used to re-stream the whole job log from the start."""
    from airflow_ray_provider.jobs.outcome import resume_offset

    log = "".join(f"line {i}\n" for i in range(100)) + "partial"
    offset = resume_offset(log, 20)
    lines, _ = new_log_lines(log, offset)
    assert lines == [f"line {i}" for i in range(80, 100)]
    assert resume_offset("a\nb\n", 20) == 0 and resume_offset("", 20) == 0 and resume_offset("x", 20) == 0
    assert new_log_lines(log, resume_offset(log, 1))[0] == ["line 99"]
