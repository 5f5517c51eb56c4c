"""RayJobSensor in poke, reschedule and deferrable modes, through ``dag.test()`` on a real head."""

from __future__ import annotations

import pendulum
import pytest

from tests.fixtures.dag_runs import task_states as ti_states
from tests.fixtures.dag_runs import write_dag_module
from tests.fixtures.dag_runs import xcom_value as xcom_of

pytestmark = pytest.mark.integration
WHEN = pendulum.datetime(2024, 1, 4, tz="UTC")

_SOURCE = """
import pendulum
from airflow.sdk import DAG
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
from airflow_ray_provider.sensors.ray_job import RayJobSensor

CONN = {conn!r}
SLEEP = "python -c 'import time; time.sleep(3)'"

def sid_of(task_id):
    return "{{{{ ti.xcom_pull(task_ids='" + task_id + "')['submission_id'] }}}}"

with DAG({dag_id!r}, schedule=None, start_date=pendulum.datetime(2024, 1, 1)) as dag:
    previous = None
    for mode in ("poke", "reschedule", "deferrable"):
        submit = SubmitRayJobOperator(task_id=f"submit_{{mode}}", ray_conn_id=CONN, entrypoint=SLEEP,
                                      wait_for_completion=False)
        sense = RayJobSensor(task_id=f"sense_{{mode}}", ray_conn_id=CONN,
                             submission_id=sid_of(submit.task_id), poke_interval=1, timeout=300,
                             mode="reschedule" if mode == "reschedule" else "poke",
                             deferrable=mode == "deferrable")
        if previous is not None:
            previous >> submit
        submit >> sense
        previous = sense
    bad = SubmitRayJobOperator(
        task_id="submit_bad", ray_conn_id=CONN, wait_for_completion=False,
        entrypoint="python -c 'import sys; print(\\"sensor-sees-this\\"); sys.exit(2)'",
    )
    bad >> RayJobSensor(task_id="sense_bad", ray_conn_id=CONN, submission_id=sid_of("submit_bad"),
                        poke_interval=1)
    RayJobSensor(task_id="sense_missing", ray_conn_id=CONN, submission_id="no-such-job-xyz",
                 poke_interval=1)
"""


def test_sensor_modes(airflow_db, ray_conn_id, job_prefix, capfd):
    from airflow.models.taskreschedule import TaskReschedule
    from airflow.utils.session import create_session

    module = write_dag_module(job_prefix, _SOURCE.format(conn=ray_conn_id, dag_id=job_prefix))
    dag_run = module.dag.test(logical_date=WHEN, run_after=WHEN)
    text = "".join(capfd.readouterr())
    states = ti_states(dag_run)
    for mode in ("poke", "reschedule", "deferrable"):
        assert states[f"sense_{mode}"] == "success", (mode, states)
        result = xcom_of(dag_run, f"sense_{mode}")
        assert result["status"] == "SUCCEEDED"
        assert result["submission_id"] == xcom_of(dag_run, f"submit_{mode}")["submission_id"]
    assert states["sense_bad"] == "failed" and states["sense_missing"] == "failed"
    assert "RayJobFailedError" in text and "sensor-sees-this" in text and "no-such-job-xyz" in text
    with create_session() as session:
        reschedules = [r for r in session.query(TaskReschedule).all() if r.ti_id in {
            ti.id for ti in dag_run.get_task_instances() if ti.task_id == "sense_reschedule"}]  # fmt: skip
    assert reschedules, "the reschedule-mode sensor never rescheduled"
    deferred = [line for line in text.splitlines() if "Pausing task as DEFERRED" in line]
    assert any("task_id=sense_deferrable" in line for line in deferred), (
        "the deferrable sensor never deferred"
    )
