"""One truth for Ray job state, shared by the operator, the sensor and the trigger: :class:`JobStatus`
mirrors Ray's ``JobStatus`` member for member (a test checks it), because importing Ray's loads all of
``ray``, which the triggerer must not.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class JobStatus(str, Enum):
    """The status of a Ray job, value-identical to ``ray.job_submission.JobStatus``."""

    #: Submitted; waiting for the driver to start (resources, runtime_env setup).
    PENDING = "PENDING"
    #: The entrypoint is running.
    RUNNING = "RUNNING"
    #: Stopped by a user (``ray job stop``, ``on_kill``, a timeout).
    STOPPED = "STOPPED"
    #: The entrypoint exited with code 0.
    SUCCEEDED = "SUCCEEDED"
    #: The entrypoint exited non-zero, or the job could not start (e.g. runtime_env failed).
    FAILED = "FAILED"

    def is_terminal(self) -> bool:
        """Whether the job will never change status again (same rule as Ray's ``is_terminal``)."""
        return self in (JobStatus.STOPPED, JobStatus.SUCCEEDED, JobStatus.FAILED)

    def is_success(self) -> bool:
        """Whether the job finished successfully."""
        return self is JobStatus.SUCCEEDED


@dataclass(frozen=True)
class JobState:
    """A snapshot of one Ray job, parsed from the Job API's ``GET /api/jobs/{id}`` response (times in
    milliseconds since the epoch, Ray's clock; ``driver_exit_code`` once the entrypoint exited)."""

    submission_id: str
    status: JobStatus
    message: str | None = None
    driver_exit_code: int | None = None
    error_type: str | None = None
    start_time: int | None = None
    end_time: int | None = None
    entrypoint: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)

    @property
    def is_terminal(self) -> bool:
        """Whether the job has finished."""
        return self.status.is_terminal()

    @property
    def is_success(self) -> bool:
        """Whether the job succeeded."""
        return self.status.is_success()

    @classmethod
    def from_api(cls, details: Any) -> JobState:
        """Parse one job of the Job API (Ray's ``JobDetails`` or its JSON) or of :meth:`to_dict`
        (``ValueError`` without a submission id or with an unknown status)."""
        data = details if isinstance(details, dict) else vars(details)
        if not data.get("submission_id"):
            raise ValueError(f"Job API response has no submission_id: keys {sorted(data)}")
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known.update(submission_id=str(data["submission_id"]), metadata=dict(data.get("metadata") or {}))
        known["status"] = JobStatus(getattr(data.get("status"), "value", data.get("status")))
        return cls(**known)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (for trigger events and XCom)."""
        return {**asdict(self), "status": self.status.value}
