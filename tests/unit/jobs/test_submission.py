"""Submission ids, entrypoint quoting, metadata and input validation (all before any I/O)."""

from __future__ import annotations

import re
import shlex

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs.submission import (
    JobSpec,
    attempt_of,
    attempt_submission_id,
    base_submission_id,
    build_entrypoint,
    build_metadata,
)

pytestmark = pytest.mark.unit
RUN = "scheduled__2024-01-01T00:00:00+00:00"


def test_submission_id_is_deterministic_safe_and_short():
    first = base_submission_id("my dag/ü", RUN, "train.zone", 3)
    assert first == base_submission_id("my dag/ü", RUN, "train.zone", 3)
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", first)
    assert "-m3-" in first and first.startswith("airflow-")
    assert len(base_submission_id("d" * 300, "r" * 300, "t" * 300)) <= 160


def test_submission_id_distinguishes_task_instances_even_when_sanitised_alike():
    ids = {
        base_submission_id("a:b", RUN, "t"),
        base_submission_id("a/b", RUN, "t"),
        base_submission_id("a:b", RUN, "t", 0),
        base_submission_id("a:b", RUN + "x", "t"),
        base_submission_id("a:b", RUN, "u"),
    }
    assert len(ids) == 5


def test_attempt_ids_round_trip():
    base = base_submission_id("d", RUN, "t")
    assert attempt_submission_id(base, 1) == base
    assert attempt_of(base, base) == 1
    assert attempt_of(base, attempt_submission_id(base, 7)) == 7
    assert attempt_of(base, base + "-a1") is None
    assert attempt_of(base, "other-a2") is None
    assert attempt_of(base, base_submission_id("d", RUN, "t2")) is None
    with pytest.raises(ValueError):
        attempt_submission_id(base, 0)


def test_entrypoint_list_is_quoted_so_the_shell_sees_the_same_arguments():
    args = ["python", "-c", "import sys; print(sys.argv)", "it's", "a b", "$HOME", ";rm -rf /"]
    command = build_entrypoint(args)
    assert shlex.split(command) == args
    assert build_entrypoint("  python x.py  ") == "python x.py"


@pytest.mark.parametrize("bad", ["", "   ", [], [""], None, 42])
def test_empty_or_wrong_entrypoint_is_rejected(bad):
    with pytest.raises(RayInvalidInputError, match="entrypoint"):
        build_entrypoint(bad)


def test_metadata_merges_and_airflow_keys_always_win():
    merged = build_metadata(
        {"team": "b", "airflow_dag_id": "spoofed", "n": 1}, task_instance={"dag_id": "d", "try_number": 2}
    )
    assert merged == {"team": "b", "n": "1", "airflow_dag_id": "d", "airflow_try_number": "2"}
    with pytest.raises(RayInvalidInputError):
        build_metadata(["not", "a", "dict"])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs",
    [
        {"entrypoint_num_cpus": -1},
        {"entrypoint_num_gpus": "1"},
        {"entrypoint_memory": 1.5},
        {"entrypoint_num_cpus": float("nan")},
        {"entrypoint_resources": {"TPU": -2}},
        {"entrypoint_resources": ["TPU"]},
    ],
)
def test_bad_resources_are_rejected(kwargs):
    with pytest.raises(RayInvalidInputError):
        JobSpec(entrypoint="x", **kwargs)


def test_spec_submit_kwargs_drop_unset_values():
    spec = JobSpec(entrypoint="x", entrypoint_num_cpus=0.5, entrypoint_resources={"r": 1})
    assert spec.submit_kwargs() == {
        "entrypoint": "x",
        "entrypoint_num_cpus": 0.5,
        "entrypoint_resources": {"r": 1},
    }
