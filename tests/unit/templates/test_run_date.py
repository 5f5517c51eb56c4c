"""Runs without a logical date render every templated field of the shipped DAGs.

Airflow 3 leaves ``ds``, ``logical_date`` and ``data_interval_*`` out of the context of a run triggered
without a logical date (``airflow dags trigger`` without ``--logical-date``, the REST API's
``logical_date: null``, asset-triggered runs); ``{{ ds }}`` then failed with ``'ds' is undefined`` while
rendering ``prepare``. The shipped DAGs use :data:`RUN_DATE`, which falls back to ``run_after``.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_ray_provider.templates import RUN_DATE, RUN_DATE_NODASH
from tests.fixtures.dag_runs import load_dag
from tests.fixtures.templates import REPO_ROOT

pytestmark = pytest.mark.unit

TRIGGERED = datetime(2026, 12, 1, 21, 30, tzinfo=timezone.utc)
LOGICAL = datetime(2026, 11, 28, tzinfo=timezone.utc)


def _context(task: Any, logical_date: datetime | None) -> dict[str, Any]:
    """The context keys a run has whether or not it has a logical date (``ds`` etc. only with one)."""
    context: dict[str, Any] = {
        "dag": task.dag, "task": task, "run_id": "manual__2026-12-01T21:30:00+00:00",
        "ti": SimpleNamespace(try_number=1, dag_id=task.dag_id, task_id=task.task_id, map_index=-1,
                              xcom_pull=lambda **_: {"upstream": "value"}),
        "dag_run": SimpleNamespace(logical_date=logical_date, run_after=TRIGGERED),
    }  # fmt: skip
    if logical_date is not None:
        context.update(logical_date=logical_date, ds=logical_date.strftime("%Y-%m-%d"))
    return context


def _rendered(dag: Any, logical_date: datetime | None) -> dict[str, Any]:
    """Every task's templated fields, rendered by the DAG's Jinja environment as Airflow renders them
    before ``execute`` (upstream XComs stand in as a small dict)."""
    env, rendered = dag.get_template_env(), {}
    for task in dag.tasks:
        context = _context(task, logical_date)
        rendered[task.task_id] = {name: task.render_template(getattr(task, name), context, env)
                                  for name in task.template_fields}  # fmt: skip
    return rendered


@pytest.mark.parametrize("logical_date", [None, LOGICAL], ids=["no-logical-date", "logical-date"])
def test_nightly_dag_renders_with_and_without_a_logical_date(
    logical_date: datetime | None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AIRFLOW_RAY_DATA_ROOT", str(tmp_path))
    for name in ("AIRFLOW_RAY_CONN_ID", "AIRFLOW_RAY_CLUSTER_CONN_ID", "AIRFLOW_RAY_SAMPLE_DATA"):
        monkeypatch.delenv(name, raising=False)
    dag = load_dag(REPO_ROOT / "dags" / "nightly_model_validation.py")
    day = (logical_date or TRIGGERED).strftime("%Y-%m-%d")
    tasks = _rendered(dag, logical_date)
    prepare = tasks["prepare"]["entrypoint"]
    assert prepare[prepare.index("--ds") + 1] == day
    config = json.loads(tasks["evaluate"]["entrypoint"][-1])
    assert config["data_uri"] == f"{tmp_path}/logs/dt={day}"
    assert config["output_uri"] == f"{tmp_path}/validation/{day}"
    assert config["run_info"]["logical_date"] == str(logical_date)
    assert config["run_info"]["run_after"] == str(TRIGGERED)
    assert tasks["collect_metrics"]["artifact_uri"] == f"{tmp_path}/validation/{day}"


def test_run_date_falls_back_to_run_after_and_keeps_the_logical_day() -> None:
    from airflow.sdk import DAG

    env = DAG(dag_id="run_date").get_template_env()
    runs = {"none": SimpleNamespace(logical_date=None, run_after=TRIGGERED),
            "set": SimpleNamespace(logical_date=LOGICAL, run_after=TRIGGERED)}  # fmt: skip
    render = {
        key: env.from_string(f"{RUN_DATE}|{RUN_DATE_NODASH}").render(dag_run=run) for key, run in runs.items()
    }
    assert render == {"none": "2026-12-01|20261201", "set": "2026-11-28|20261128"}
    with pytest.raises(Exception, match="'ds' is undefined"):  # what the shipped DAG hit before
        env.from_string("{{ ds }}").render(dag_run=runs["none"])


@pytest.mark.parametrize("path", ["dags/nightly_model_validation.py", "dags/zone_training.py"])
def test_shipped_dags_use_no_logical_date_only_template(path: str) -> None:
    text = (REPO_ROOT / path).read_text()
    for variable in ("{{ ds", "{{ logical_date", "{{ data_interval", "{{ ts"):
        assert variable not in text, f"{path} uses {variable} }}}}, undefined in a run without a logical date"
