"""A user's clear of a deferred task, under real Airflow services: the job is kept, never fought over.

The api-server, scheduler, dag-processor and triggerer are separate processes
(:mod:`tests.fixtures.airflow_services`). A deferrable ``SubmitRayJobOperator`` waits in the real
triggerer for a job that runs until the test lets it end; the test clears the task instance ten times
in a row, each time once its new try has deferred again. Each clear runs the old trigger's ``on_kill``
(the triggerer's user-action path) while the new try starts: the old trigger must leave the job alone,
the new try must re-attach to it, and no try may fail. At the end there is one Ray job, and the task
succeeded on its last try.
"""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.submission import base_submission_id
from tests.fixtures.airflow_services import AirflowServices

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]

DAG_ID, TASK_ID, CONN_ID, CLEARS = "clear_while_deferred", "job", "ray_clears", 10


def _dag_file(folder: Path, marker: Path) -> Path:
    """A DAG whose job runs until ``marker`` exists (so the clears, not the job, set the pace)."""
    code = f"import os, time\nwhile not os.path.exists({str(marker)!r}): time.sleep(0.5)\nprint('let go')"
    path = folder / f"{DAG_ID}.py"
    path.write_text(
        textwrap.dedent(f'''
        from datetime import datetime

        from airflow.sdk import DAG

        from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

        with DAG("{DAG_ID}", schedule=None, start_date=datetime(2024, 1, 1), catchup=False):
            SubmitRayJobOperator(
                task_id="{TASK_ID}", ray_conn_id="{CONN_ID}", entrypoint=["{sys.executable}", "-c", {code!r}],
                deferrable=True, poll_interval=1.0, retries=0,
            )
    ''')
    )
    return path


def _ti(services: AirflowServices, run_id: str) -> dict[str, Any]:
    return services.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}")


def _deferred_at_try(services: AirflowServices, run_id: str, try_number: int) -> dict[str, Any] | None:
    ti = _ti(services, run_id)
    return ti if ti["state"] == "deferred" and ti["try_number"] == try_number else None


def _deferral_seen(services: AirflowServices, try_number: int) -> str | None:
    """The scheduler's line for the exit of ``try_number``'s deferring process, once it processed it."""
    return next(
        (
            line
            for line in services.output("scheduler").splitlines()
            if "TaskInstance Finished:" in line
            and "state=deferred," in line
            and f"try_number={try_number}," in line
        ),
        None,
    )


def test_ten_clears_of_a_deferred_task_keep_its_one_job_and_the_task_succeeds(
    airflow_services: Any, ray_head: Any, ray_head_token: str, ray_job_hook: Any, tmp_path: Path
) -> None:
    marker = tmp_path / "let-go"
    connection = {"conn_type": "ray", "host": ray_head.dashboard_url, "password": ray_head_token}
    services: AirflowServices = airflow_services(
        [_dag_file(tmp_path, marker)], {f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection)}
    )
    services.wait("the DAG to be parsed", lambda: services.request("GET", f"/api/v2/dags/{DAG_ID}"), 60)
    run_id = services.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None})["dag_run_id"]
    sid = base_submission_id(DAG_ID, run_id, TASK_ID)

    for try_number in range(1, CLEARS + 1):
        services.wait(
            f"try {try_number} deferred", lambda t=try_number: _deferred_at_try(services, run_id, t), 90
        )
        state = ray_job_hook.get_job(sid)
        assert state is not None and not state.status.is_terminal(), (try_number, state)  # never stopped
        body = {"dry_run": False, "task_ids": [TASK_ID], "dag_run_id": run_id, "only_failed": False}
        services.request("POST", f"/api/v2/dags/{DAG_ID}/clearTaskInstances", body)

    services.wait("the last try deferred", lambda: _deferred_at_try(services, run_id, CLEARS + 1), 90)
    # Airflow 3.3's scheduler fails a resumed try when it drains the exit event of the try's deferring
    # process only after the resume (apache/airflow#72716, a loaded scheduler): the job ends once the
    # scheduler has seen that exit, so what is tested is the provider, not that race.
    services.wait(
        "the scheduler to see the last try's deferral", lambda: _deferral_seen(services, CLEARS + 1), 90
    )
    marker.write_text("done")
    finished = services.wait(
        "the task to finish",
        lambda: ti if (ti := _ti(services, run_id))["state"] in ("success", "failed") else None,
        120,
    )
    assert finished["state"] == "success" and finished["try_number"] == CLEARS + 1, finished
    tries = services.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}/tries")
    # Airflow's history records a try cleared before it finished as failed; the last try is the live one
    states = [t["state"] for t in sorted(tries["task_instances"], key=lambda t: t["try_number"])]
    assert states == ["failed"] * CLEARS + ["success"], tries
    # one job for the task instance, run once: every try re-attached to it (no -a2)
    assert sorted(j.submission_id for j in ray_job_hook.list_jobs() if sid in j.submission_id) == [sid]
    assert ray_job_hook.get_job(sid).status is JobStatus.SUCCEEDED
    assert ray_job_hook.get_logs(sid).splitlines().count("let go") == 1  # its driver ran once
