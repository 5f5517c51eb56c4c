"""Pure rules of the Ray job path, shared by every run, the sensor and the CLI.

Submission ids and the re-attach rule, the job status type, the job outcome (XCom result or error) and
log streaming by offset. No Airflow hook and no Ray client here.
"""

from airflow_ray_provider.jobs.logs import DEFAULT_TAIL_LINES, LOG_PREFIX, new_log_lines, resume_offset, tail
from airflow_ray_provider.jobs.outcome import dashboard_job_url, job_result, raise_for_state, timeout_error
from airflow_ray_provider.jobs.reattach import Choice, Decision, decide, submit_or_attach
from airflow_ray_provider.jobs.status import JobState, JobStatus, is_success, is_terminal
from airflow_ray_provider.jobs.submission import (
    JobSpec,
    attempt_of,
    attempt_submission_id,
    base_submission_id,
    build_entrypoint,
    build_metadata,
    check_entrypoint_reservation,
    check_runtime_env,
)

__all__ = [
    "DEFAULT_TAIL_LINES",
    "LOG_PREFIX",
    "Choice",
    "Decision",
    "JobSpec",
    "JobState",
    "JobStatus",
    "attempt_of",
    "attempt_submission_id",
    "base_submission_id",
    "build_entrypoint",
    "build_metadata",
    "check_entrypoint_reservation",
    "check_runtime_env",
    "dashboard_job_url",
    "decide",
    "is_success",
    "is_terminal",
    "job_result",
    "new_log_lines",
    "raise_for_state",
    "resume_offset",
    "submit_or_attach",
    "tail",
    "timeout_error",
]
