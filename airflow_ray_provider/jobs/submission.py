"""What gets submitted, and under which id: the deterministic submission id (no try number; later
attempts get ``-a2``, ``-a3``, ...), the re-attach rule (docs/operators.md), the quoted entrypoint,
metadata, and the checks that run before anything reaches Ray.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import math
import os
import re
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_ray_provider.exceptions import RayInvalidInputError, RayJobAlreadyExistsError
from airflow_ray_provider.jobs.client import RAY_IMPORT, JobState

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_PART_LIMIT = 40
METADATA_PREFIX = "airflow_"


def _clean(value: str, limit: int = _PART_LIMIT) -> str:
    cleaned = _UNSAFE.sub("_", value).strip("_.-")
    return cleaned[:limit] or "x"


def base_submission_id(dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> str:
    """The submission id of a task instance's first job (deterministic; no try number)."""
    digest = hashlib.sha256(f"{dag_id}\0{run_id}\0{task_id}\0{map_index}".encode()).hexdigest()[:10]
    mapped = f"-m{map_index}" if map_index is not None and map_index >= 0 else ""
    return f"airflow-{_clean(dag_id)}-{_clean(task_id)}{mapped}-{_clean(run_id)}-{digest}"


def attempt_submission_id(base: str, attempt: int) -> str:
    """The id of the ``attempt``-th job of a task instance (1 is the base id itself)."""
    if attempt < 1:
        raise ValueError(f"attempt must be >= 1, got {attempt}")
    return base if attempt == 1 else f"{base}-a{attempt}"


def attempt_of(base: str, submission_id: str) -> int | None:
    """The attempt number of ``submission_id`` under ``base``, or ``None`` if it is not one of its ids."""
    if submission_id == base:
        return 1
    match = re.fullmatch(re.escape(base) + r"-a([0-9]+)", submission_id)
    return int(match.group(1)) if match and int(match.group(1)) >= 2 else None


def build_entrypoint(entrypoint: str | list[Any] | tuple[Any, ...]) -> str:
    """The shell command Ray runs: a string as is, a list of arguments safely quoted; refuses an empty
    one or another type."""
    if isinstance(entrypoint, str):
        if not entrypoint.strip():
            raise RayInvalidInputError("entrypoint is empty; pass a command such as 'python job.py'")
        return entrypoint.strip()
    if isinstance(entrypoint, (list, tuple)):
        if not entrypoint or not str(entrypoint[0]).strip():
            raise RayInvalidInputError("entrypoint list is empty; pass e.g. ['python', 'job.py', '--x', '1']")
        return shlex.join(str(arg) for arg in entrypoint)
    raise RayInvalidInputError(
        f"entrypoint must be a string or a list of arguments, got {type(entrypoint).__name__}"
    )


def build_metadata(metadata: Any, *, task_instance: dict[str, Any] | None = None) -> dict[str, str]:
    """The job's metadata as strings, plus the ``airflow_*`` task-instance keys (they always win)."""
    if not isinstance(metadata, dict | None):
        raise RayInvalidInputError(f"metadata must be a dict of strings, got {type(metadata).__name__}")
    merged = {str(k): str(v) for k, v in (metadata or {}).items()}
    return merged | {f"{METADATA_PREFIX}{key}": str(value) for key, value in (task_instance or {}).items()}


def check_runtime_env(runtime_env: Any, *, local_paths: bool = True) -> dict[str, Any]:
    """A copy of ``runtime_env``, its shapes checked (clear messages, no Ray import). ``local_paths``: where
    the job is submitted from, not where a DAG is parsed: also check that a local ``working_dir`` exists,
    then let Ray's ``RuntimeEnv`` parse it (unknown plugins, bad field types)."""
    if runtime_env is None:
        return {}
    if not isinstance(runtime_env, dict) or not all(isinstance(k, str) for k in runtime_env):
        raise RayInvalidInputError(
            f"runtime_env must be a dict with string keys, got {type(runtime_env).__name__}"
        )
    env_vars = runtime_env.get("env_vars")
    if env_vars is not None and (
        not isinstance(env_vars, dict) or not all(isinstance(v, str) for v in env_vars.values())
    ):
        raise RayInvalidInputError("runtime_env['env_vars'] must be a dict of string to string")
    working_dir = runtime_env.get("working_dir")
    if working_dir is not None and (not isinstance(working_dir, str) or not working_dir):
        raise RayInvalidInputError("runtime_env['working_dir'] must be a folder path or a remote URI")
    if local_paths and working_dir and "://" not in working_dir and not os.path.exists(working_dir):
        raise RayInvalidInputError(
            f"runtime_env['working_dir'] {working_dir!r} does not exist on this worker; "
            "pass a local folder (it is uploaded) or a remote URI (s3://..., gs://..., https://...zip)"
        )
    if local_paths:
        try:
            with RAY_IMPORT:
                from ray.runtime_env import RuntimeEnv

            RuntimeEnv(**runtime_env)
        except Exception as exc:  # Ray raises TypeError/ValueError/others for bad fields
            raise RayInvalidInputError(f"runtime_env is invalid: {exc}") from exc
    return dict(runtime_env)


def check_entrypoint_reservation(
    num_cpus: Any = None, num_gpus: Any = None, memory: Any = None, resources: Any = None
) -> None:
    """Check what a job's entrypoint reserves (``None``: not set, or not rendered yet), naming the
    argument to fix."""
    if not isinstance(resources, dict | None):
        raise RayInvalidInputError("entrypoint_resources must be a dict of resource name to amount")
    numbers = {"entrypoint_num_cpus": num_cpus, "entrypoint_num_gpus": num_gpus, "entrypoint_memory": memory}
    numbers |= {f"entrypoint_resources[{name!r}]": amount for name, amount in (resources or {}).items()}
    for name, value in numbers.items():
        kinds = (int,) if name == "entrypoint_memory" else (int, float)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, kinds) or value < 0 or not math.isfinite(value)
        ):
            kind = "a non-negative integer" if kinds == (int,) else "a non-negative number"
            raise RayInvalidInputError(f"{name} must be {kind}, got {value!r}")


@dataclass(frozen=True)
class JobSpec:
    """A validated job submission (without its id); ``entrypoint_*``: what the entrypoint reserves
    (``entrypoint_memory`` in bytes)."""

    entrypoint: str
    runtime_env: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_memory: int | None = None
    entrypoint_resources: dict[str, float] | None = None

    def __post_init__(self) -> None:
        reservation = (self.entrypoint_num_cpus, self.entrypoint_num_gpus, self.entrypoint_memory)
        check_entrypoint_reservation(*reservation, self.entrypoint_resources)

    def submit_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``JobSubmissionClient.submit_job`` (unset and empty values dropped)."""
        return {k: v for k, v in asdict(self).items() if v is not None and v != {}}


class Choice(str, enum.Enum):
    """What a (re)started task instance does with its job."""

    SUBMIT = "submit"
    ATTACH = "attach"
    DONE = "done"


@dataclass(frozen=True)
class Decision:
    """The decision for one task instance: the ``choice``, the id to submit under or of the job to
    attach to or finish with, and that job's ``state`` (``None`` for ``SUBMIT``)."""

    choice: Choice
    submission_id: str
    state: JobState | None = None


def decide(base: str, jobs: list[JobState]) -> Decision:
    """Apply the rule to the jobs of the cluster (any jobs: those not under ``base`` are ignored)."""
    attempts = [(n, job) for job in jobs if (n := attempt_of(base, job.submission_id)) is not None]
    if not attempts:
        return Decision(Choice.SUBMIT, base)
    number, latest = max(attempts, key=lambda item: item[0])
    if not latest.is_terminal:
        return Decision(Choice.ATTACH, latest.submission_id, latest)
    if latest.is_success:
        return Decision(Choice.DONE, latest.submission_id, latest)
    return Decision(Choice.SUBMIT, attempt_submission_id(base, number + 1))


def submit_or_attach(
    base: str, list_jobs: Callable[[], list[JobState]], submit: Callable[[str], str], *, races: int = 3
) -> Decision:
    """Decide, and submit when the decision says so; on an "already exists" race, decide again (at most
    ``races`` times). The decision carried out (``SUBMIT``: a job was just submitted)."""
    for _ in range(races):
        decision = decide(base, list_jobs())
        with contextlib.suppress(RayJobAlreadyExistsError):  # another process won this race
            if decision.choice is Choice.SUBMIT:
                submit(decision.submission_id)
            return decision
    raise RayJobAlreadyExistsError(
        f"lost {races} submission races for {base!r}; another process keeps submitting its jobs",
        http_status=500,
        url="",
    )
