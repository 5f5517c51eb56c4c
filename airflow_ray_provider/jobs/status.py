"""One truth for Ray job state, shared by the operator, the sensor and the trigger.

Ray's own :class:`ray.job_submission.JobStatus` is the reference. It cannot be imported here: importing
``ray.job_submission`` loads all of ``ray`` (seconds of CPU and ~100 MB), and the triggerer must run
hundreds of triggers without ``ray`` installed. So :class:`JobStatus` mirrors Ray's enum value for value
and ``is_terminal()`` mirrors Ray's rule; ``tests/unit/jobs/test_status.py`` asserts both against the
installed Ray member for member, so a Ray release that adds a state fails CI instead of leaving a
trigger waiting forever. Nothing else in the provider keeps a list of states: every caller asks
:meth:`JobStatus.is_terminal` / :meth:`JobStatus.is_success`.

No Airflow or Ray imports.
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
    """A snapshot of one Ray job, parsed from the Job API's ``GET /api/jobs/{id}`` response.

    :param submission_id: the job's submission id.
    :param status: its status.
    :param message: Ray's human-readable status message.
    :param driver_exit_code: the entrypoint's exit code once it has exited (Ray >= 2.40), else ``None``.
    :param error_type: Ray's error classification for failed jobs, e.g. ``"JOB_ENTRYPOINT_COMMAND_ERROR"``.
    :param start_time: submission time in milliseconds since the epoch (Ray's clock).
    :param end_time: end time in milliseconds since the epoch, once terminal.
    :param entrypoint: the entrypoint command.
    :param metadata: the job's metadata.
    """

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
        """Parse one job of the Job API: Ray's ``JobDetails``, or the same as JSON.

        :raises ValueError: when it has no submission id or an unknown status.
        """
        data = details if isinstance(details, dict) else vars(details)
        if not data.get("submission_id"):
            raise ValueError(f"Job API response has no submission_id: keys {sorted(data)}")
        status = getattr(data.get("status"), "value", data.get("status"))
        return cls.from_dict({**data, "status": status, "metadata": dict(data.get("metadata") or {})})

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (for trigger events and XCom)."""
        data = asdict(self)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobState:
        """Rebuild a state from :meth:`to_dict` output."""
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        known["submission_id"] = str(known["submission_id"])
        known["status"] = JobStatus(known.get("status"))
        return cls(**known)
