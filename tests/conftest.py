"""Shared test harness: an isolated Airflow home on SQLite, a real local Ray head, and per-area fixtures.

The environment is set at import time, before anything imports Airflow, so every test (and every
subprocess it starts) sees the temporary ``AIRFLOW_HOME`` and never the user's.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

_AIRFLOW_HOME = tempfile.mkdtemp(prefix="arp-airflow-")
os.environ.update(
    {
        "AIRFLOW_HOME": _AIRFLOW_HOME,
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{_AIRFLOW_HOME}/airflow.db",
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": os.path.join(_AIRFLOW_HOME, "dags"),
        "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "RAY_USAGE_STATS_ENABLED": "0",
        # The local backend's registry of running heads, private to this test process (its default is
        # one folder per user in /tmp, which another test run's janitor would read).
        "AIRFLOW_RAY_LOCAL_REGISTRY": os.path.join(_AIRFLOW_HOME, "local-registry"),
    }
)
os.environ.pop("RAY_ADDRESS", None)
os.environ.pop("RAY_AUTH_TOKEN", None)

# Each area keeps its fixtures in its own module (helpers and tests of one layer live together); DAG runs
# (write a DAG file, ``dag.test()``, task states, XComs) have one module that every area uses.
pytest_plugins = [
    "tests.fixtures.head_count",
    "tests.fixtures.cpu_time",
    "tests.fixtures.ray_connection",
    "tests.fixtures.ray_address",
    "tests.fixtures.dag_runs",
    "tests.fixtures.ray_job",
    "tests.fixtures.kuberay",
    "tests.fixtures.evaluation",
    "tests.fixtures.zone_training",
    "tests.fixtures.templates",
    "tests.fixtures.airflow_services",
    "tests.fixtures.s3",
    "tests.fixtures.test_order",
]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the temporary Airflow home."""
    shutil.rmtree(_AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> str:
    """A migrated SQLite metadata DB in the temporary Airflow home; returns the home path."""
    from airflow.utils.db import initdb

    os.makedirs(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], exist_ok=True)
    initdb()
    return _AIRFLOW_HOME


@pytest.fixture(scope="session")
def ray_head() -> Iterator[object]:
    """A real local Ray head (Job API on 127.0.0.1, token auth on), stopped at session end.

    Yields a :class:`airflow_ray_provider.local.LocalHeadInfo`.
    """
    from airflow_ray_provider.local import LocalHeadConfig, start_head, stop_head

    ready_timeout = float(os.environ.get("ARP_TEST_HEAD_READY_TIMEOUT", "90"))  # raise on a loaded machine
    info = start_head(LocalHeadConfig(num_cpus=4, auth=True, ready_timeout=ready_timeout), name="pytest-head")
    try:
        yield info
    finally:
        stop_head(info)


@pytest.fixture(scope="session")
def ray_head_token(ray_head: object) -> str:
    """The auth token of the session's Ray head."""
    from airflow_ray_provider.local import read_token

    return read_token(ray_head.token_file)  # type: ignore[attr-defined]
