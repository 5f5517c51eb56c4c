"""Runtime environments are checked before submission: shapes first, then Ray's own parser."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs.submission import check_runtime_env

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("runtime_env", "match"),
    [
        (["pip"], "must be a dict"),
        ({1: "x"}, "string keys"),
        ({"env_vars": {"A": 1}}, "env_vars"),
        ({"working_dir": "/no/such/folder/anywhere"}, "does not exist"),
        ({"pip": 42}, "runtime_env is invalid"),
        ({"conda": "x", "pip": ["y"]}, "runtime_env is invalid"),
    ],
)
def test_malformed_runtime_env_is_rejected(runtime_env, match):
    with pytest.raises(RayInvalidInputError, match=match):
        check_runtime_env(runtime_env)


def test_valid_runtime_env_passes(tmp_path):
    env = {"working_dir": str(tmp_path), "pip": ["requests"], "env_vars": {"A": "1"}}
    assert check_runtime_env(env) == env
    assert check_runtime_env({"working_dir": "s3://bucket/pkg.zip"})["working_dir"].startswith("s3://")
    assert check_runtime_env(None) == {}
