"""``launch.run``: the whole lifecycle in one call, for a laptop (the ``airflow-ray`` CLI) or a script.

Check everything -> reach the target (start or find the run's own cluster) -> submit or re-attach (the
submission id comes from the run's ``name``: a rerun never submits twice) -> wait (the one step
function, streaming the log) -> end as the job ended -> clean up by the one table (:mod:`.cleanup`).
A ``KeyboardInterrupt`` (Ctrl-C) is a user's kill: the job is stopped and the run's own cluster deleted,
unless ``cleanup="never"``. A KubeRay RayJob target takes the RayJob path of the operator
(:class:`~airflow_ray_provider.clusters.KubeRayJobs`: plan, ensure or re-attach, look): the RayJob is
the job and owns its cluster, so cleanup deletes the RayJob. No Airflow imports.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.clusters import (
    ATTACHED,
    RESUMED,
    KubeRayJobs,
    RayJobPlan,
    RayJobStatus,
    raise_for_rayjob,
)
from airflow_ray_provider.exceptions import RayInvalidInputError, RayProviderError
from airflow_ray_provider.jobs.log_stream import tail
from airflow_ray_provider.jobs.reattach import Action, submit_or_attach
from airflow_ray_provider.jobs.status import JobState, JobStatus
from airflow_ray_provider.jobs.submission import (
    JobSpec,
    base_submission_id,
    build_entrypoint,
    check_runtime_env,
)
from airflow_ray_provider.launch.cleanup import Cleanup, Ending, actions_for
from airflow_ray_provider.launch.ray_job import event_for, finish, wait_for_job
from airflow_ray_provider.launch.rayjob import RayJobWatch, rayjob_plan, wait_for_rayjob
from airflow_ray_provider.launch.target import (
    CLI_DAG_ID,
    CLI_TASK_ID,
    KubeRayJob,
    Reached,
    Target,
    job_api_of,
    plan_rayjob,
    reach,
    run_name,
)
from airflow_ray_provider.launch.wait import WaitPlan

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import RayJobLook


@dataclass(frozen=True)
class RunResult:
    """A finished, succeeded run.

    :param name: the run's name (rerun with it to re-attach).
    :param state: the job's final state.
    :param dashboard_url: the cluster's dashboard.
    :param reattached: the job was not submitted by this call (it ran or had run already).
    """

    name: str
    state: JobState
    dashboard_url: str
    reattached: bool


def _print_lines(lines: list[str]) -> None:
    for line in lines:
        print(line, flush=True)


def _say(message: str) -> None:
    print(f"airflow-ray: {message}", file=sys.stderr, flush=True)


def job_spec(
    entrypoint: str | list[str], *, runtime_env: Any = None, working_dir: str | Path | None = None, name: str
) -> JobSpec:
    """Check the job before anything starts: entrypoint, runtime env, working dir (shipped by Ray)."""
    env = check_runtime_env(runtime_env)
    if working_dir is not None:
        folder = Path(working_dir)
        if not folder.is_dir():
            raise RayInvalidInputError(f"working_dir {str(working_dir)!r} is not a folder")
        env["working_dir"] = str(folder.resolve())
    metadata = {"airflow_ray_run": name}
    return JobSpec(entrypoint=build_entrypoint(entrypoint), runtime_env=env, metadata=metadata)


def run(
    entrypoint: str | list[str],
    *,
    target: Target,
    name: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    working_dir: str | Path | None = None,
    cleanup: Cleanup | str = Cleanup.ON_EXCEPTION,
    timeout: float | None = None,
    poll_interval: float = 1.0,
    emit: Callable[[list[str]], None] = _print_lines,
    say: Callable[[str], None] = _say,
) -> RunResult:
    """Run ``entrypoint`` as a Ray job on ``target``, streaming its log; clean up as ``cleanup`` says.

    :param entrypoint: shell command, or a list of arguments (quoted safely).
    :param target: where (:mod:`airflow_ray_provider.launch.target`).
    :param name: the run's name: a rerun with the same name re-attaches instead of submitting again.
    :param runtime_env: Ray runtime environment.
    :param working_dir: a local folder Ray packages and ships with the job (your dev checkout).
    :param cleanup: ``never``, ``on_exception`` (default) or ``always`` (docs/launch.md, "Cleanup").
    :param timeout: seconds from the job's start before it is stopped and the run fails (a RayJob:
        its ``activeDeadlineSeconds``, which KubeRay enforces).
    :param poll_interval: seconds between looks.
    :param emit: writes job-log lines (default: stdout).
    :param say: writes status lines (default: stderr).
    :returns: the succeeded run.
    :raises RayInvalidInputError: bad input, before any cluster exists.
    :raises RayJobFailedError, RayJobStoppedError, RayJobTimeoutError: the job's own ending.
    :raises KeyboardInterrupt: after stopping the job and deleting the run's cluster (Ctrl-C).
    """
    policy = Cleanup.parse(cleanup)
    name = run_name(name)
    spec = job_spec(entrypoint, runtime_env=runtime_env, working_dir=working_dir, name=name)
    if isinstance(target, KubeRayJob):
        return _run_rayjob(spec, _with_deadline(target, timeout), name, policy, poll_interval, emit, say)
    reached = reach(target, name, log=say)
    ending, sid = Ending.FAILED, None
    try:
        base = base_submission_id(CLI_DAG_ID, name, CLI_TASK_ID)
        plan = submit_or_attach(base, reached.api.list_jobs, lambda s: reached.api.submit_job(spec, s))
        sid = plan.submission_id
        verbs = {
            Action.SUBMIT: "Submitted",
            Action.ATTACH: "Re-attached to running",
            Action.DONE: "Found finished",
        }
        say(f"{verbs[plan.action]} Ray job {sid} (run {name!r}); dashboard {reached.dashboard_url}")
        state = (
            _wait(reached, sid, timeout, poll_interval, emit)
            if plan.action is not Action.DONE
            else plan.state
        )
        assert state is not None
        ending = Ending.SUCCEEDED
        return RunResult(name, state, reached.dashboard_url, plan.action is not Action.SUBMIT)
    except KeyboardInterrupt:
        ending = Ending.USER_KILL
        raise
    finally:
        _clean_up(reached, policy, ending, sid, say)


def _wait(
    reached: Reached, sid: str, timeout: float | None, poll_interval: float, emit: Callable[[list[str]], None]
) -> JobState:
    first = reached.api.get_job(sid)
    start = first.start_time / 1000.0 if first is not None and first.start_time else time.time()
    plan = WaitPlan(start_time=start, timeout=timeout)
    outcome = wait_for_job(reached.api, sid, plan, emit=emit, poll_interval=poll_interval)
    return finish(event_for(sid, outcome), logs=lambda s: _logs(reached, s), timeout=timeout)


def _logs(reached: Reached, sid: str) -> str:
    try:
        return reached.api.get_job_logs(sid)
    except Exception:
        return ""


def _clean_up(
    reached: Reached, policy: Cleanup, ending: Ending, sid: str | None, say: Callable[[str], None]
) -> None:
    actions = actions_for(policy, ending)
    try:
        if actions.stop_job and sid is not None:
            stopped = reached.api.stop_job(sid)
            say(f"Stopped Ray job {sid} (was running: {stopped})")
        if reached.handle is not None:
            if actions.delete_cluster:
                reached.delete_cluster()
                say(f"Deleted Ray cluster {reached.handle.name}")
            else:
                say(f"Kept Ray cluster {reached.handle.name} (cleanup={policy.value})")
    finally:
        reached.close()


# --------------------------------------------------------------------------- a KubeRay RayJob
class _SayLog:
    """A ``log.info`` / ``log.debug`` for :class:`RayJobWatch` that writes status lines through ``say``."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say

    def info(self, message: str, *args: Any) -> None:
        self.say(message % args)

    def debug(self, message: str, *args: Any) -> None:
        pass


def _with_deadline(target: KubeRayJob, timeout: float | None) -> KubeRayJob:
    """``timeout`` as the RayJob's ``activeDeadlineSeconds`` (KubeRay enforces it; whole seconds)."""
    if timeout is None:
        return target
    if target.active_deadline_seconds is not None:
        raise RayInvalidInputError("pass timeout or the RayJob's active_deadline_seconds, not both")
    return dataclasses.replace(target, active_deadline_seconds=max(1, math.ceil(timeout)))


def _run_rayjob(
    job: JobSpec,
    target: KubeRayJob,
    name: str,
    policy: Cleanup,
    poll_interval: float,
    emit: Callable[[list[str]], None],
    say: Callable[[str], None],
) -> RunResult:
    """Create (or re-attach to) the run's RayJob, stream its log until KubeRay is done, clean up."""
    jobs, plan = plan_rayjob(target, job, name)  # every check; still no API call
    ending, ensured = Ending.FAILED, False
    try:
        action, status = jobs.ensure(plan)
        ensured = True
        say(f"RayJob {plan.namespace}/{plan.name} {action} (run {name!r}): {status.summary()}")
        final, url, text = _wait_rayjob(jobs, plan, poll_interval, emit, say)
        raise_for_rayjob(final, tail(text))  # KubeRayJobError: reason, message and the log's last lines
        ending = Ending.SUCCEEDED
        state = JobState(final.job_id, JobStatus(final.job_status), message=final.message or None)
        return RunResult(name, state, url or "", action in (ATTACHED, RESUMED))
    except KeyboardInterrupt:
        ending = Ending.USER_KILL
        raise
    finally:
        try:
            if ensured:
                _clean_up_rayjob(jobs, plan, policy, ending, say)
        finally:
            jobs.close()


def _wait_rayjob(
    jobs: KubeRayJobs,
    plan: RayJobPlan,
    poll_interval: float,
    emit: Callable[[list[str]], None],
    say: Callable[[str], None],
) -> tuple[RayJobStatus, str | None, str]:
    """Look until the RayJob is final (the wait's one step function); its status, dashboard and log."""
    watch = RayJobWatch(_SayLog(say), lambda cluster: job_api_of(jobs.backend, cluster))

    def look() -> RayJobLook | None:
        return watch.look(jobs, plan.name, namespace=plan.namespace, template=plan.dashboard_url_template)

    outcome = wait_for_rayjob(
        rayjob_plan(), look=look, read_logs=watch.read, emit=emit, poll_interval=poll_interval
    )
    final = outcome.seen.subject
    if final is None:
        raise RayProviderError(f"{plan.where} was deleted while this run waited for it")
    cluster = watch.cluster(final)
    return final.status, cluster.dashboard_url if cluster is not None else None, watch.text


def _clean_up_rayjob(
    jobs: KubeRayJobs, plan: RayJobPlan, policy: Cleanup, ending: Ending, say: Callable[[str], None]
) -> None:
    """The cleanup table for a RayJob: it is the job and owns its cluster, so either action deletes it."""
    actions = actions_for(policy, ending)
    if actions.stop_job or actions.delete_cluster:
        jobs.delete(plan.name, namespace=plan.namespace, wait=True)
        say(f"Deleted {plan.where} (KubeRay stops its Ray job and deletes its cluster)")
    else:
        say(f"Kept {plan.where} (cleanup={policy.value})")
