"""What a finished ``@task.ray`` job means for the task: the function's value, or its remote error.

Pure rules over the job's last framed message (:mod:`airflow_ray_provider.workloads.function.protocol`),
shared by the blocking and the deferred path (both end in the operator's ``result``).
"""

from __future__ import annotations

from typing import Any

from airflow_ray_provider.exceptions import RayTaskError, RayTaskFunctionError
from airflow_ray_provider.workloads.function import (
    KIND_ERROR,
    KIND_URI,
    KIND_VALUE,
    Message,
    ResultTransportError,
    read_result_file,
)

_WHAT_FAILED = {
    "setup": "could not load the function",
    "result": "ran the function but could not return its value",
}


def task_error(
    message: Message, submission_id: str, *, status: str = "FAILED", log_tail: str = ""
) -> RayTaskError:
    """The error for an ``error`` message: the remote type, message and traceback, and where it failed."""
    error = message.data
    stage, kind, text = str(error.get("stage", "")), str(error.get("type", "")), str(error.get("message", ""))
    remote_tb = str(error.get("traceback", "")).rstrip()
    fields = {
        "submission_id": submission_id, "status": status, "stage": stage, "remote_type": kind,
        "remote_message": text, "remote_traceback": remote_tb, "log_tail": log_tail,
    }  # fmt: skip
    if stage == "function":
        return RayTaskFunctionError(
            f"the @task.ray function raised {kind}: {text}\n"
            f"Remote traceback (Ray job {submission_id}):\n{remote_tb}",
            **fields,
        )
    what = _WHAT_FAILED.get(stage, f"failed ({stage})")
    return RayTaskError(f"Ray job {submission_id} {what}: {kind}: {text}", **fields)


def task_value(message: Message | None, submission_id: str) -> Any:
    """The function's return value from a succeeded job's last message.

    :raises RayTaskError: no message (the log lost it), an error message, or an unreadable result file.
    """
    if message is None:
        raise RayTaskError(
            f"Ray job {submission_id} succeeded but its log holds no @task.ray result; was the log "
            "truncated, or the entrypoint replaced?",
            submission_id=submission_id, status="SUCCEEDED",
        )  # fmt: skip
    if message.kind == KIND_ERROR:
        raise task_error(message, submission_id, status="SUCCEEDED")
    if message.kind == KIND_VALUE:
        return message.data
    if message.kind == KIND_URI:
        try:
            return read_result_file(message.data)
        except ResultTransportError as exc:
            raise RayTaskError(
                f"Ray job {submission_id}: {exc}",
                submission_id=submission_id,
                status="SUCCEEDED",
                stage="result",
            ) from exc
    raise RayTaskError(
        f"Ray job {submission_id}: unknown result kind {message.kind!r}", submission_id=submission_id
    )
