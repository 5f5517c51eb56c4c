"""Embedded defaults of the shipped DAGs, overridable through environment variables.

=============================== ===================================================================
``AIRFLOW_RAY_DATA_ROOT``        where sample data, models and artifacts live (default: ``demo_output/``
                                 beside the ``dags/`` folder); must be visible to Airflow *and* Ray
``AIRFLOW_RAY_CONN_ID``          run on this existing Ray cluster (a ``ray`` connection), no setup/teardown
``AIRFLOW_RAY_CLUSTER_CONN_ID``  create ephemeral KubeRay clusters through this ``kuberay`` connection
``AIRFLOW_RAY_MODE``             ``ephemeral`` (default), ``rayjob`` (KubeRay RayJobs; needs the
                                 connection above), ``standing`` (with ``AIRFLOW_RAY_CLUSTER_NAME``),
                                 ``one_task`` or ``pool`` (see :class:`~.common.ClusterSettings`)
``AIRFLOW_RAY_POOL``             the shared cluster of ``pool`` mode (setting it selects that mode)
``AIRFLOW_RAY_POOL_IDLE_TTL``    seconds the pool's cluster stays after its last lease (default 600)
``AIRFLOW_RAY_CLUSTER_NAME``     the standing RayCluster (or local head) to run on, never deleted
``AIRFLOW_RAY_CLUSTER_SPEC``     the cluster spec as JSON (e.g. ``{"worker_groups": [...]}``) for the
                                 clusters the DAGs create
``AIRFLOW_RAY_PYTHON``           the ``python`` of the jobs' entrypoints (default: ``python`` on a
                                 cluster, Airflow's interpreter on a local head)
``AIRFLOW_RAY_LOCAL_CPUS``       logical CPUs of an ephemeral local head (default 4)
``AIRFLOW_RAY_SAMPLE_DATA``      ``true`` (default): a ``prepare`` job generates missing sample data
``AIRFLOW_RAY_EVAL_ROWS``        rows of a generated daily log partition (default 100000)
``AIRFLOW_RAY_POLL_INTERVAL``    seconds between Ray job status polls (default 2; tests use less)
=============================== ===================================================================

With none of them set, the DAGs run on an ephemeral local Ray head per run (the embedded default).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from airflow_ray_provider.templates.common import ClusterSettings

DATA_ROOT_ENV = "AIRFLOW_RAY_DATA_ROOT"


def _env(name: str) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or None


def data_root(dags_folder: str | Path | None = None) -> str:
    """The data root: ``$AIRFLOW_RAY_DATA_ROOT``, else ``<dags folder>/../demo_output``."""
    explicit = _env(DATA_ROOT_ENV)
    if explicit:
        return explicit
    base = Path(dags_folder) if dags_folder else Path.cwd() / "dags"
    return str(base.resolve().parent / "demo_output")


def cluster_settings() -> ClusterSettings:
    """Where the shipped DAGs run (see the module docstring)."""
    ray_conn = _env("AIRFLOW_RAY_CONN_ID")
    if ray_conn:
        return ClusterSettings(ray_conn_id=ray_conn)
    mode, conn_id = _env("AIRFLOW_RAY_MODE"), _env("AIRFLOW_RAY_CLUSTER_CONN_ID")
    name = _env("AIRFLOW_RAY_CLUSTER_NAME")
    cpus = int(_env("AIRFLOW_RAY_LOCAL_CPUS") or 4)
    local = {"num_cpus": cpus} if not conn_id and mode in (None, "ephemeral", "one_task", "pool") else None
    spec = json.loads(_env("AIRFLOW_RAY_CLUSTER_SPEC") or "null")
    pool_name = _env("AIRFLOW_RAY_POOL")
    pool = {"name": pool_name, "idle_ttl": _seconds("AIRFLOW_RAY_POOL_IDLE_TTL", 600.0, zero=True)}
    return ClusterSettings(
        conn_id=conn_id, spec=spec, local_options=local, mode=mode,  # type: ignore[arg-type]
        cluster_name=name, python=_env("AIRFLOW_RAY_PYTHON"), pool=pool if pool_name else None,
    )  # fmt: skip


def sample_data_enabled() -> bool:
    """Whether the shipped DAGs generate missing sample data in a ``prepare`` job."""
    return (_env("AIRFLOW_RAY_SAMPLE_DATA") or "true").lower() in ("1", "true", "yes")


def eval_rows() -> int:
    """Rows of a generated daily partition."""
    return int(_env("AIRFLOW_RAY_EVAL_ROWS") or 100_000)


def poll_interval() -> float:
    """Seconds between the shipped DAGs' Ray job status polls (``AIRFLOW_RAY_POLL_INTERVAL``, default 2).

    :raises ValueError: when it is not a positive number (named, when the DAG file is parsed).
    """
    return _seconds("AIRFLOW_RAY_POLL_INTERVAL", 2.0)


def _seconds(name: str, default: float, *, zero: bool = False) -> float:
    """The environment variable ``name`` as seconds (``default`` when unset), positive (or 0 with ``zero``).

    :raises ValueError: naming the variable, when the DAG file is parsed.
    """
    raw = _env(name)
    try:
        seconds = float(raw) if raw else default
    except ValueError:
        seconds = -1.0
    if not (seconds >= 0 if zero else seconds > 0):
        kind = "0 or more" if zero else "a positive number of"
        raise ValueError(f"{name} must be {kind} seconds, got {raw!r}")
    return seconds
