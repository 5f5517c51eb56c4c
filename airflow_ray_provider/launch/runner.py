"""``launch.run``: a whole run in one call, for a laptop (the ``airflow-ray`` CLI) or a script.

Check everything -> reach the target (start or find the run's own cluster) -> submit or re-attach (the
submission id comes from the run's ``name``: a rerun never submits twice) -> wait, streaming the log ->
end as the job ended -> clean up by the one table (:mod:`.cleanup`). It is :class:`~.run.JobRun` with
the terminal's defaults: the job's log goes to stdout, status lines to stderr, and a ``KeyboardInterrupt``
(Ctrl-C; the CLI turns SIGTERM into one) is a user's kill at any instant, during a cluster's start too.
No Airflow imports.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_ray_provider.clusters import PoolOptions
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.jobs.status import JobState, JobStatus
from airflow_ray_provider.jobs.submission import (
    Choice,
    JobSpec,
    base_submission_id,
    build_entrypoint,
    check_runtime_env,
)
from airflow_ray_provider.launch.cleanup import Cleanup
from airflow_ray_provider.launch.pool import pool_options
from airflow_ray_provider.launch.run import JobRun, print_lines
from airflow_ray_provider.launch.targets import CLI_DAG_ID, CLI_TASK_ID, KubeRayJob, Target, resolve


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


def _say(message: str) -> None:
    print(f"airflow-ray: {message}", file=sys.stderr, flush=True)


def _with_deadline(target: Target, timeout: float | None) -> Target:
    """A RayJob's ``timeout`` is its ``activeDeadlineSeconds`` (KubeRay enforces it; whole seconds)."""
    if timeout is None or not isinstance(target, KubeRayJob):
        return target
    if target.active_deadline_seconds is not None:
        raise RayInvalidInputError("pass timeout or the RayJob's active_deadline_seconds, not both")
    return dataclasses.replace(target, active_deadline_seconds=max(1, math.ceil(timeout)))


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
    pool: PoolOptions | dict[str, Any] | None = None,
    emit: Callable[[list[str]], None] = print_lines,
    say: Callable[[str], None] = _say,
) -> RunResult:
    """Run ``entrypoint`` as a Ray job on ``target``, streaming its log; clean up as ``cleanup`` says.

    :param entrypoint: shell command, or a list of arguments (quoted safely).
    :param target: where (:mod:`airflow_ray_provider.launch.targets`).
    :param name: the run's name: a rerun with the same name re-attaches instead of submitting again.
    :param runtime_env: Ray runtime environment.
    :param working_dir: a local folder Ray packages and ships with the job (your dev checkout).
    :param cleanup: ``never``, ``on_exception`` (default) or ``always`` (docs/launch.md, "Cleanup").
    :param timeout: seconds from the job's start before it is stopped and the run fails (a RayJob:
        its ``activeDeadlineSeconds``, which KubeRay enforces).
    :param poll_interval: seconds between looks.
    :param pool: run on this pool's cluster (``PoolOptions`` or its fields, e.g. ``{"name": "eval",
        "idle_ttl": 600}``), of ``target``'s spec, shared with every run that names the pool; the cluster
        stays ``idle_ttl`` seconds after the last run ends (docs/launch.md, "Pools").
    :param emit: writes job-log lines (default: stdout).
    :param say: writes status lines (default: stderr).
    :returns: the succeeded run.
    :raises RayInvalidInputError: bad input, before any cluster exists.
    :raises RayJobFailedError, RayJobStoppedError, RayJobTimeoutError, KubeRayJobError: the job's ending.
    :raises KeyboardInterrupt: after cleaning up as a user's kill (Ctrl-C).
    """
    policy = Cleanup.parse(cleanup)
    name = name or f"run-{uuid.uuid4().hex[:8]}"  # a rerun with the same name re-attaches
    env = check_runtime_env(runtime_env)
    if working_dir is not None:  # a local folder Ray ships with the job
        if not Path(working_dir).is_dir():
            raise RayInvalidInputError(f"working_dir {str(working_dir)!r} is not a folder")
        env["working_dir"] = str(Path(working_dir).resolve())
    spec = JobSpec(build_entrypoint(entrypoint), runtime_env=env, metadata={"airflow_ray_run": name})
    target = _with_deadline(target, timeout)
    where = resolve(target, name, spec, pool_options(pool, poll_interval))  # every check; nothing started yet
    base = base_submission_id(CLI_DAG_ID, name, CLI_TASK_ID)
    timeout = None if isinstance(target, KubeRayJob) else timeout  # KubeRay enforces a RayJob's deadline
    options: dict[str, Any] = {"cleanup": policy, "timeout": timeout, "poll_interval": poll_interval}
    with JobRun(where, job=spec, base_id=base, on_lines=emit, say=say, **options) as job_run:
        job_run.start()
        job_run.wait()
        result = job_run.result()
    state = job_run.subject
    if not isinstance(state, JobState):  # a RayJob: its Ray job's final state
        state = JobState(str(result["job_id"]), JobStatus(result["status"]))
    return RunResult(name, state, result.get("dashboard_url") or "", job_run.choice is not Choice.SUBMIT)
