"""The lifecycle object, table-tested: every kind of target x every ending x every cleanup word.

The target here is a scripted stand-in of the run's own protocol (no Ray, no cluster: what a run does
with its target is the subject); the real targets are driven against real Ray heads and the KubeRay
emulator in tests/integration (test_launch_targets.py, test_cli.py, operators/).
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from airflow_ray_provider.exceptions import RayJobFailedError, RayJobTimeoutError
from airflow_ray_provider.jobs import JobState, JobStatus
from airflow_ray_provider.jobs.outcome import job_result, raise_for_state
from airflow_ray_provider.jobs.submission import Choice
from airflow_ray_provider.launch import Cleanup, Ending, JobRun, RunTarget
from airflow_ray_provider.launch.run import Observation, actions_for
from airflow_ray_provider.launch.targets import observed

pytestmark = pytest.mark.unit


class Scripted(RunTarget):
    """A run target whose job goes through the given statuses, one per look; it records every call."""

    dashboard_url = "http://dash:1"
    client = None
    stop_takes_cluster = False

    def __init__(self, *statuses: JobStatus, owned: bool = False, interrupt_reach: bool = False) -> None:
        self.statuses, self.owned, self.interrupt_reach = list(statuses), owned, interrupt_reach
        self.calls: list[str] = []
        self.log = ""

    def reach(self, say: Any) -> None:
        self.calls.append("reach")
        if self.interrupt_reach:  # Ctrl-C while the cluster starts: it exists, half made
            raise KeyboardInterrupt

    def submit(self, job: Any, base_id: str) -> tuple[Choice, str, Any]:
        self.calls.append("submit")
        return Choice.SUBMIT, base_id, None

    def _next(self, sid: str) -> Observation:
        status = self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]
        self.log += f"line {status.value}\n"
        return observed(JobState(sid, status, start_time=int(time.time() * 1000)), self.log)

    def look(self, sid: str, *, with_log: bool) -> Observation:
        return self._next(sid)

    async def alook(self, sid: str, *, with_log: bool) -> Observation:
        return self._next(sid)

    def stop(self, sid: str) -> bool:
        self.calls.append("stop")
        self.statuses = [JobStatus.STOPPED]  # Ray stops it; the next look says so
        return True

    async def astop(self, sid: str) -> bool:
        return self.stop(sid)

    def delete(self, say: Any) -> bool:
        self.calls.append("delete")
        return True

    def logs(self, sid: str) -> str:
        return self.log

    def keep(self, say: Any) -> None:
        say("Kept")

    def dashboard(self) -> None:
        return None

    def link(self, sid: str) -> str:
        return f"{self.dashboard_url}/#/jobs/{sid}"

    def result(self, subject: JobState, logs: Any, tail_lines: int) -> dict[str, Any]:
        if not subject.is_success:
            raise_for_state(subject, logs(), tail_lines=tail_lines)
        return job_result(subject, self.dashboard_url)

    def restore(self, data: dict[str, Any]) -> JobState:
        return JobState.from_api(data)

    def ref(self) -> dict[str, Any]:
        return {"scripted": True}

    def close(self) -> None:
        self.calls.append("close")

    async def aclose(self) -> None:
        pass


def _run(target: Scripted, cleanup: Cleanup, **kwargs: Any) -> JobRun:
    lines: list[str] = []
    run = JobRun(target, job=object(), base_id="sid", cleanup=cleanup, poll_interval=0, on_lines=lines.extend,
                 say=lambda _: None, **kwargs)  # type: ignore[arg-type]  # fmt: skip
    run.lines = lines  # type: ignore[attr-defined]
    return run


def _end_run(target: Scripted, cleanup: Cleanup, ending: Ending) -> None:
    """Take one run to ``ending`` the way it happens: the job's own end, its timeout, Ctrl-C, a SIGTERM."""
    run = _run(target, cleanup, timeout=0.0 if ending is Ending.TIMED_OUT else None)
    try:
        with run:
            run.reach()
            run.submit()
            if ending is Ending.USER_KILL:
                raise KeyboardInterrupt
            if ending is Ending.WORKER_SIGTERM:
                run.kill(Ending.WORKER_SIGTERM)  # what on_kill does; the wait stops at its next look
            run.wait()
            if ending is not Ending.WORKER_SIGTERM:
                run.result()
    except (RayJobFailedError, RayJobTimeoutError, KeyboardInterrupt):
        assert ending is not Ending.SUCCEEDED


STATUSES = {
    Ending.SUCCEEDED: (JobStatus.RUNNING, JobStatus.SUCCEEDED),
    Ending.FAILED: (JobStatus.RUNNING, JobStatus.FAILED),
    Ending.TIMED_OUT: (JobStatus.RUNNING,),
    Ending.USER_KILL: (JobStatus.RUNNING,),
    Ending.WORKER_SIGTERM: (JobStatus.RUNNING,),
}


@pytest.mark.parametrize("owned", [False, True], ids=["given-cluster", "own-cluster"])
@pytest.mark.parametrize("ending", list(Ending))
@pytest.mark.parametrize("cleanup", list(Cleanup))
def test_every_target_ending_and_cleanup_word_does_what_the_table_says(owned, ending, cleanup):
    target = Scripted(*STATUSES[ending], owned=owned)
    _end_run(target, cleanup, ending)
    actions = actions_for(cleanup, ending)
    running_at_the_end = ending not in (Ending.SUCCEEDED, Ending.FAILED)
    assert target.calls.count("stop") == int(actions.stop_job and running_at_the_end), target.calls
    assert target.calls.count("delete") == int(owned and actions.delete_cluster), target.calls
    assert target.calls[-1] == "close"  # every way out releases the target's clients


@pytest.mark.parametrize(
    ("cleanup", "deleted"), [(Cleanup.NEVER, False), (Cleanup.ON_EXCEPTION, True), (Cleanup.ALWAYS, True)]
)
def test_ctrl_c_while_the_cluster_starts_deletes_what_was_started_as_cleanup_says(cleanup, deleted):
    target = Scripted(JobStatus.RUNNING, owned=True, interrupt_reach=True)
    with pytest.raises(KeyboardInterrupt), _run(target, cleanup) as run:
        run.reach()
        run.submit()
    assert ("delete" in target.calls) is deleted and "submit" not in target.calls


def test_an_exception_while_the_cluster_starts_deletes_it_too():
    class Broken(Scripted):
        def reach(self, say: Any) -> None:
            self.calls.append("reach")
            raise OSError("image pull failed")

    target = Broken(JobStatus.RUNNING, owned=True)
    with pytest.raises(OSError), _run(target, Cleanup.ON_EXCEPTION) as run:
        run.reach()
        run.submit()
    assert target.calls == ["reach", "delete", "close"]


def test_both_transports_drive_the_same_step_to_the_same_end():
    """The blocking and the async wait see the same looks and end the same way, writing the same lines."""
    statuses = (JobStatus.PENDING, JobStatus.RUNNING, JobStatus.FAILED)
    blocking, asynced = _run(Scripted(*statuses), Cleanup.NEVER), _run(Scripted(*statuses), Cleanup.NEVER)
    for run in (blocking, asynced):
        run.submission_id, run.choice = "sid", Choice.SUBMIT
    blocking.wait()
    asyncio.run(asynced.await_end())
    assert blocking.last == asynced.last and blocking.last is not None
    assert blocking.last.ending is Ending.FAILED
    assert blocking.lines == asynced.lines == ["line PENDING", "line RUNNING", "line FAILED"]  # type: ignore[attr-defined]
    assert (
        blocking.plan.log_offset
        == asynced.plan.log_offset
        == len("line PENDING\nline RUNNING\nline FAILED\n")
    )


@pytest.mark.parametrize(("cleanup", "stopped"), [(Cleanup.NEVER, False), (Cleanup.ON_EXCEPTION, True)])
def test_a_timeout_stops_the_job_only_when_the_step_says_so(cleanup, stopped):
    target = Scripted(JobStatus.RUNNING)
    run = _run(target, cleanup, timeout=0.0)
    run.submission_id, run.choice = "sid", Choice.SUBMIT
    run.wait()
    assert run.last is not None and run.last.ending is Ending.TIMED_OUT
    assert run.stopped is stopped and target.calls.count("stop") == int(stopped)
    with pytest.raises(RayJobTimeoutError, match="stopped" if stopped else "left running"):
        run.result()


def test_a_handed_over_run_is_not_cleaned_up_and_its_state_travels_as_json():
    target = Scripted(JobStatus.RUNNING, owned=True)
    with _run(target, Cleanup.ALWAYS, timeout=30.0) as run:
        run.reach()
        run.submit()
        state = json.loads(json.dumps(run.hand_over()))  # what the trigger's kwargs and event carry
    assert "delete" not in target.calls and "stop" not in target.calls
    again = JobRun.from_state(state, Scripted(JobStatus.SUCCEEDED, owned=True), say=lambda _: None)
    assert (again.submission_id, again.base_id, again.cleanup, again.timeout) == (
        "sid",
        "sid",
        Cleanup.ALWAYS,
        30.0,
    )
    assert again.choice is Choice.SUBMIT and again.plan.start_time == run.plan.start_time
    assert again.subject == run.subject and again.target.ref() == state["target"]


def test_each_cleanup_action_runs_once_whichever_path_gets_there_first():
    target = Scripted(JobStatus.RUNNING, owned=True)
    with pytest.raises(KeyboardInterrupt), _run(target, Cleanup.ALWAYS) as run:
        run.reach()
        run.submit()
        run.kill(Ending.WORKER_SIGTERM)  # on_kill cleaned up already ...
        raise KeyboardInterrupt  # ... and the way out must not do it again
    assert target.calls.count("stop") == 1 and target.calls.count("delete") == 1


def test_the_dashboard_link_is_given_once_when_known():
    links: list[str] = []
    run = _run(Scripted(JobStatus.RUNNING, JobStatus.SUCCEEDED), Cleanup.NEVER, on_link=links.append)
    run.reach()
    run.submit()
    run.wait()
    assert links == ["http://dash:1/#/jobs/sid"] and run.result()["status"] == "SUCCEEDED"
