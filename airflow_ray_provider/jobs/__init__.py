"""Pure rules of the Ray job path, shared by operator, sensor and trigger.

Submission ids and the re-attach table, the job status type, the job outcome (XCom result or error) and
log streaming by offset. No Airflow hook or Ray client is used here.
"""

from airflow_ray_provider.jobs.log_stream import DEFAULT_TAIL_LINES, LOG_PREFIX, new_log_lines, tail
from airflow_ray_provider.jobs.outcome import (
    EVENT_DONE,
    EVENT_ERROR,
    EVENT_TIMEOUT,
    dashboard_job_url,
    job_result,
    make_event,
    raise_for_state,
    timeout_error,
    validate_event,
)
from airflow_ray_provider.jobs.reattach import Action, Plan, decide, submit_or_attach
from airflow_ray_provider.jobs.status import JobState, JobStatus, is_success, is_terminal
from airflow_ray_provider.jobs.submission import (
    JobSpec,
    attempt_of,
    attempt_submission_id,
    base_submission_id,
    build_entrypoint,
    build_metadata,
    check_runtime_env,
)

__all__ = [
    "DEFAULT_TAIL_LINES",
    "EVENT_DONE",
    "EVENT_ERROR",
    "EVENT_TIMEOUT",
    "LOG_PREFIX",
    "Action",
    "JobSpec",
    "JobState",
    "JobStatus",
    "Plan",
    "attempt_of",
    "attempt_submission_id",
    "base_submission_id",
    "build_entrypoint",
    "build_metadata",
    "check_runtime_env",
    "dashboard_job_url",
    "decide",
    "is_success",
    "is_terminal",
    "job_result",
    "make_event",
    "new_log_lines",
    "raise_for_state",
    "submit_or_attach",
    "tail",
    "timeout_error",
    "validate_event",
]
