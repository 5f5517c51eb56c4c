"""SubmitRayJobOperator against the real local head, calling ``execute`` with a stand-in task instance.

The slow scenarios (each waits for a real job) run concurrently in one module fixture and each test
asserts on its own scenario's outcome; Airflow itself (dag.test, deferral, XCom, crash) is covered in
``test_ray_job_dag.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from airflow_ray_provider.exceptions import (
    RayInvalidInputError,
    RayJobFailedError,
    RayJobStoppedError,
    RayJobTimeoutError,
)
from airflow_ray_provider.hooks.ray_job import LOG_PREFIX, RayJobHook, target_from_ref
from airflow_ray_provider.jobs import JobStatus
from airflow_ray_provider.jobs.client import JobClient
from airflow_ray_provider.jobs.submission import base_submission_id
from airflow_ray_provider.operators.base import JOB_URL_XCOM_KEY
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
from tests.fixtures.ray_job import RAY_CONN_ID, StandInTI, context_for, job_ids_for

pytestmark = pytest.mark.integration


def _op(**kwargs: Any) -> SubmitRayJobOperator:
    kwargs.setdefault("ray_conn_id", None if "cluster" in kwargs else RAY_CONN_ID)
    return SubmitRayJobOperator(task_id="submit", poll_interval=0.3, retry_attempts=3, **kwargs)


def _run(op: SubmitRayJobOperator, ti: StandInTI) -> Any:
    try:
        return op.execute(context_for(ti))
    except Exception as exc:
        return exc


def _wait_terminal(hook: JobClient, sid: str, timeout: float = 60) -> JobStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = hook.get_job(sid)
        if state is not None and state.is_terminal:
            return state.status
        time.sleep(0.3)
    raise AssertionError(f"{sid} did not finish")


def _failing(prefix: str, **_: Any) -> dict[str, Any]:
    code = "import sys\nfor i in range(60): print('fail line', i)\nsys.exit(3)"
    return {"error": _run(_op(entrypoint=["python", "-c", code]), StandInTI(dag_id=f"{prefix}_fail"))}


def _timeout(prefix: str, **_: Any) -> dict[str, Any]:
    ti = StandInTI(dag_id=f"{prefix}_timeout")
    op = _op(entrypoint="python -c 'import time; time.sleep(120)'", job_timeout=4)
    return {
        "error": _run(op, ti),
        "sid": base_submission_id(ti.dag_id, ti.run_id, ti.task_id),
        "xcoms": ti.xcoms,
    }


def _working_dir(prefix: str, tmp: Any, cluster: dict[str, Any], **_: Any) -> dict[str, Any]:
    marker = uuid.uuid4().hex
    (tmp / "main.py").write_text("from helper import VALUE\nprint('working-dir says', VALUE)\n")
    (tmp / "helper.py").write_text(f"VALUE = {marker!r}\n")
    ti = StandInTI(dag_id=f"{prefix}_wd")
    op = _op(entrypoint="python main.py", runtime_env={"working_dir": str(tmp)}, cluster=cluster)
    hook = target_from_ref({"handle": cluster}).dashboard()
    result = _run(op, ti)
    logs = hook.get_logs(result["submission_id"]) if isinstance(result, dict) else ""
    return {"result": result, "marker": marker, "logs": logs, "xcoms": ti.xcoms}


def _retries(prefix: str, tmp: Any, **_: Any) -> dict[str, Any]:
    flag = tmp / "second-try-ok"
    code = f"import os, sys; sys.exit(0 if os.path.exists({str(flag)!r}) else 1)"
    outcomes = []
    for try_number in (1, 2, 3):
        if try_number == 2:
            flag.write_text("ok")
        ti = StandInTI(dag_id=f"{prefix}_retry", try_number=try_number)
        outcomes.append(_run(_op(entrypoint=["python", "-c", code]), ti))
    return {"outcomes": outcomes, "base": base_submission_id(f"{prefix}_retry", StandInTI.run_id, "submit")}


def _on_kill(prefix: str, hook: JobClient, **_: Any) -> dict[str, Any]:
    ti = StandInTI(dag_id=f"{prefix}_kill")
    sid = base_submission_id(ti.dag_id, ti.run_id, ti.task_id)
    op = _op(entrypoint="python -c 'import time; time.sleep(120)'", cleanup="always")
    box: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: box.setdefault("error", _run(op, ti)))
    worker.start()
    deadline = time.monotonic() + 90
    while (state := hook.get_job(sid)) is None or state.status is not JobStatus.RUNNING:
        assert time.monotonic() < deadline, "job never started"
        time.sleep(0.3)
    op.on_kill()
    worker.join(60)
    return {"error": box.get("error"), "status": _wait_terminal(hook, sid), "alive": worker.is_alive(),
            "xcoms": ti.xcoms}  # fmt: skip


@pytest.fixture(scope="module")
def outcomes(ray_conn_id, ray_cluster_handle, tmp_path_factory) -> Any:
    prefix = f"rjop{uuid.uuid4().hex[:6]}"
    hook = RayJobHook(ray_conn_id, retry_attempts=3).client
    scenarios = {"failing": _failing, "timeout": _timeout, "working_dir": _working_dir,
                 "retries": _retries, "on_kill": _on_kill}  # fmt: skip
    with ThreadPoolExecutor(len(scenarios)) as pool:
        futures = {
            name: pool.submit(
                fn, prefix, tmp=tmp_path_factory.mktemp(name), cluster=ray_cluster_handle, hook=hook
            )
            for name, fn in scenarios.items()
        }
        results = {name: future.result() for name, future in futures.items()}
    yield results
    for job in hook.list_jobs():
        if prefix in job.submission_id and not job.is_terminal:
            hook.stop(job.submission_id)


def test_failing_entrypoint_raises_with_exit_code_and_log_tail(outcomes):
    """The error carries the exit code and the log's last 50 lines, which end with the driver's last line.

    Ray's job supervisor writes its own ``Running entrypoint for job ...: <command>`` header (three lines
    here) into the same log, and on a loaded machine sometimes after a short driver's output: the driver's
    own lines are judged apart from it.
    """
    err = outcomes["failing"]["error"]
    assert isinstance(err, RayJobFailedError), err
    assert err.status == "FAILED" and err.exit_code == 3
    tail = err.log_tail.splitlines()
    own = [line for line in tail if line.startswith("fail line ")]
    assert len(tail) <= 50 and len(own) >= 47, tail
    assert own == [f"fail line {i}" for i in range(60 - len(own), 60)], own  # the last lines, in order
    assert err.submission_id in str(err)


def test_job_timeout_stops_the_job_and_fails(outcomes, ray_job_hook):
    """``job_timeout`` counts from the submission: queued plus running covers it (on a loaded machine the
    driver may start seconds after the submission, so running alone can be short of the timeout)."""
    err = outcomes["timeout"]["error"]
    assert isinstance(err, RayJobTimeoutError), err
    assert "job_timeout=4s" in str(err) and "it was stopped" in str(err)
    assert _wait_terminal(ray_job_hook, outcomes["timeout"]["sid"]) is JobStatus.STOPPED
    usage = outcomes["timeout"]["xcoms"]["usage"]  # a timed-out job has its record, and it says so
    assert usage["ended_by"] == "timed_out" and usage["submission_id"] == outcomes["timeout"]["sid"]
    phases = usage["phases"]
    assert (phases["queued_s"] or 0.0) + phases["running_s"] >= 3.5, phases


def test_on_kill_stops_the_job(outcomes):
    outcome = outcomes["on_kill"]
    assert not outcome["alive"]
    assert isinstance(outcome["error"], RayJobStoppedError), outcome["error"]
    assert outcome["status"] is JobStatus.STOPPED
    assert outcome["xcoms"]["usage"]["ended_by"] == "killed"  # made in on_kill (and again by the wait)


def test_working_dir_is_uploaded_and_cluster_handle_works(outcomes):
    outcome = outcomes["working_dir"]
    result = outcome["result"]
    assert isinstance(result, dict), result
    assert result["status"] == "SUCCEEDED"
    assert f"working-dir says {outcome['marker']}" in outcome["logs"]
    assert result["job_url"].endswith(f"/#/jobs/{result['submission_id']}")
    # the handle's cluster is owned by the run (deleted when done): the link says so
    link = outcome["xcoms"][JOB_URL_XCOM_KEY]
    assert (
        link.startswith(result["dashboard_url"] + "/?ray_cluster=") and "ephemeral=deleted-when-done" in link
    )
    assert link.endswith(f"#/jobs/{result['submission_id']}")


def test_retries_reattach_or_resubmit_by_the_rule(outcomes, ray_job_hook):
    first, second, third = outcomes["retries"]["outcomes"]
    base = outcomes["retries"]["base"]
    assert isinstance(first, RayJobFailedError) and first.submission_id == base
    assert isinstance(second, dict) and second["submission_id"] == f"{base}-a2", second
    # Third try: the job already SUCCEEDED, so it succeeds without submitting anything.
    assert isinstance(third, dict) and third["submission_id"] == f"{base}-a2"
    assert job_ids_for(ray_job_hook, base) == [base, f"{base}-a2"]


def test_success_streams_each_line_once_with_metadata_and_no_secret(
    ray_job_hook, ray_head_token, job_prefix, capfd
):
    ti = StandInTI(dag_id=job_prefix, try_number=2, map_index=4)
    # The job prints the token it was handed: the task log must show it masked.
    code = (
        "import os, time\nprint('leak=' + os.environ['LEAK'], flush=True)\n"
        "for i in range(5):\n    print('stream', i, flush=True)\n    time.sleep(0.4)"
    )
    op = _op(
        entrypoint=["python", "-u", "-c", code],
        metadata={"owner": "tests"},
        runtime_env={"env_vars": {"LEAK": ray_head_token}},
    )
    result = op.execute(context_for(ti))
    captured = capfd.readouterr()
    text = captured.out + captured.err
    assert result["status"] == "SUCCEEDED"
    streamed = [
        line.split(LOG_PREFIX, 1)[1].split(" [airflow")[0].strip()
        for line in text.splitlines()
        if LOG_PREFIX in line
    ]
    assert [line for line in streamed if line.startswith("stream ")] == [f"stream {i}" for i in range(5)]
    assert "leak=***" in streamed  # each once, in order; the secret masked
    assert ray_head_token not in text
    assert ray_head_token not in repr(result) and ray_head_token not in repr(ti.xcoms)
    state = ray_job_hook.get_job(result["submission_id"])
    assert state.metadata["airflow_dag_id"] == job_prefix and state.metadata["airflow_map_index"] == "4"
    assert state.metadata["airflow_try_number"] == "2" and state.metadata["owner"] == "tests"
    assert state.metadata["suite"] == "pytest"  # the connection's default metadata


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"entrypoint": "   "}, "entrypoint is empty"),
        ({"entrypoint": "echo hi", "ray_conn_id": "ray_missing_conn"}, "ray_missing_conn"),
        ({"entrypoint": "echo hi", "runtime_env": {"env_vars": {"A": 1}}}, "env_vars"),
        ({"entrypoint": "echo hi", "runtime_env": "pip install x"}, "must be a dict"),
        ({"entrypoint": "echo hi", "cluster": {"backend": "local"}}, "cluster handle is missing"),
    ],
)
def test_bad_input_fails_before_anything_is_submitted(kwargs, match, job_prefix, ray_job_hook):
    """When the DAG is parsed (a literal value) or in ``execute``, before any submission."""
    ti = StandInTI(dag_id=job_prefix)
    with pytest.raises(RayInvalidInputError, match=match):
        _op(**kwargs).execute(context_for(ti))
    assert job_ids_for(ray_job_hook, job_prefix) == []


def _event(ray_conn_id: str, sid: str, subject: Any, ending: str | None, **fields: Any) -> dict[str, Any]:
    """A trigger's event: the run's state as the trigger hands it back."""
    from airflow_ray_provider.hooks.ray_job import target_from_ref
    from airflow_ray_provider.launch import Cleanup, Ending, JobRun
    from airflow_ray_provider.launch.run import Step

    run = JobRun(target_from_ref({"ray_conn_id": ray_conn_id}), submission_id=sid, base_id=sid, timeout=30.0,
                 cleanup=Cleanup.ON_EXCEPTION)  # fmt: skip
    run.subject, run.last, run.stopped = (
        subject,
        Step(Ending(ending), message=fields.pop("message", "")) if ending else None,
        True,
    )
    return {"run": run.state(), "error": fields.pop("error", None)}


def test_execute_complete_turns_every_event_into_the_right_outcome(ray_conn_id):
    from airflow_ray_provider.exceptions import RayProviderError
    from airflow_ray_provider.jobs import JobState

    op = _op(entrypoint="unused", job_timeout=30)
    ctx = context_for(StandInTI(dag_id="unused"))
    sid = "no-such-job-anywhere"  # its log cannot be read: the event's outcome must still win
    failed = JobState(submission_id=sid, status=JobStatus.FAILED, driver_exit_code=9)
    with pytest.raises(RayJobFailedError) as excinfo:
        op.execute_complete(ctx, _event(ray_conn_id, sid, failed, "failed"))
    assert excinfo.value.exit_code == 9
    running = JobState(submission_id=sid, status=JobStatus.RUNNING)
    with pytest.raises(RayJobTimeoutError, match="job_timeout=30s; it was stopped"):
        op.execute_complete(ctx, _event(ray_conn_id, sid, running, "timed_out"))
    with pytest.raises(RayProviderError, match="failed in the triggerer: boom"):
        op.execute_complete(ctx, _event(ray_conn_id, sid, running, None, error="boom"))
    with pytest.raises(RayProviderError, match="unexpected trigger event"):
        op.execute_complete(ctx, {"status": "??"})
    succeeded = JobState(submission_id=sid, status=JobStatus.SUCCEEDED)
    result = op.execute_complete(ctx, _event(ray_conn_id, sid, succeeded, "succeeded"))
    assert result["status"] == "SUCCEEDED" and result["submission_id"] == sid
