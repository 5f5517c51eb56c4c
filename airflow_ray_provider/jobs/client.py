"""The Ray Job API of one cluster, without Airflow: the one client the whole provider uses, and the job
state it returns. Job calls go through Ray's ``JobSubmissionClient``, built on first use (it loads ``ray``
and calls the cluster); the triggerer never imports ``ray``, so a deferred task polls through a small
``aiohttp`` reader, and :class:`JobStatus` mirrors Ray's member for member (a test checks it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import ssl
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, InitVar, asdict, dataclass, field, replace
from enum import Enum
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import aiohttp
import requests
import tenacity

from airflow_ray_provider.exceptions import (
    RayDashboardUnreachableError,
    RayInvalidInputError,
    RayJobAlreadyExistsError,
    RayJobApiError,
    RayProviderError,
)

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

    from airflow_ray_provider.jobs.submission import JobSpec

log = logging.getLogger(__name__)
T = TypeVar("T")
#: One thread imports ``ray`` at a time: two threads importing different parts of it at once can each see
#: the other's half-initialised ``ray`` module.
RAY_IMPORT = threading.Lock()

#: Header names whose values are credentials: masked in logs, never shown.
SENSITIVE_HEADERS = frozenset({"authorization", "cookie", "x-api-key", "proxy-authorization"})
# Ray's client raises RuntimeError("Request failed with status code 503: ...").
_STATUS = re.compile(r"status code (\d{3})")


class JobStatus(str, Enum):
    """The status of a Ray job, value-identical to ``ray.job_submission.JobStatus``: ``PENDING`` (waiting
    for the driver to start: resources, runtime_env setup), ``RUNNING``, ``STOPPED`` (by ``ray job stop``,
    ``on_kill``, a timeout), ``SUCCEEDED`` (exit code 0), ``FAILED`` (non-zero, or it could not start)."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    STOPPED = "STOPPED"
    SUCCEEDED = "SUCCEEDED"
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


def ray_token_from_environment() -> str | None:
    """The token Ray's own tools use: ``$RAY_AUTH_TOKEN``, else the file ``$RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``; ``None`` when there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or "~/.ray/auth_token").expanduser()
    return path.read_text().strip() if path.is_file() else None


def http_status(exc: BaseException) -> int | None:
    """The HTTP status an error carries (ours, aiohttp's, or the text of Ray's ``RuntimeError``)."""
    if isinstance(exc, RayJobApiError):
        return exc.http_status
    status = getattr(exc, "status", None)  # aiohttp.ClientResponseError
    if isinstance(status, int):
        return status
    if type(exc).__name__ == "AuthenticationError":  # ray.exceptions.AuthenticationError: 401/403
        return 401
    match = _STATUS.search(str(exc)) if isinstance(exc, RuntimeError) else None
    return int(match.group(1)) if match else None


def is_transient(exc: BaseException) -> bool:
    """Whether a failed call may succeed when tried again: connection errors, time-outs, 429 and 5xx, but
    not Ray's "a job with this submission id already exists" (a 500: the caller re-attaches instead)."""
    if isinstance(exc, RayJobAlreadyExistsError) or "already exists" in str(exc):
        return False
    status = http_status(exc)
    if status is not None:
        return status == 429 or 500 <= status < 600
    transient = (requests.ConnectionError, requests.Timeout, aiohttp.ClientConnectionError, TimeoutError)
    return isinstance(exc, (*transient, ConnectionError, asyncio.TimeoutError))


def retry_policy(attempts: int, *, max_wait: float = 10.0) -> dict[str, Any]:
    """``tenacity`` arguments: exponential back-off with jitter, only on :func:`is_transient`, a warning
    before each sleep, the last error re-raised."""
    return {
        "stop": tenacity.stop_after_attempt(max(1, attempts)),
        "wait": tenacity.wait_exponential(multiplier=0.5, max=max_wait) + tenacity.wait_random(0, 0.5),
        "retry": tenacity.retry_if_exception(is_transient),
        "before_sleep": tenacity.before_sleep_log(log, logging.WARNING),
        "reraise": True,
    }


@dataclass(eq=False)
class JobClient:
    """The Job API of one cluster (and the read-only routes of its dashboard).

    :param address: the dashboard's base URL, e.g. ``http://127.0.0.1:8265``.
    :param token: the Ray auth token, added to ``headers`` as ``Authorization: Bearer <token>`` (unless
        they have an ``Authorization``).
    :param verify: TLS verification: ``True``, ``False`` or a CA bundle path.
    :param metadata: job metadata added to every submission (the job's own keys win).
    :param retry_attempts: attempts per call on transient failures (1: no retry).
    :param source: where the address came from, for messages (``connection 'ray_default'``).
    """

    address: str
    _: KW_ONLY
    token: InitVar[str | None] = None
    headers: dict[str, str] = field(default_factory=dict, repr=False)  # credentials: never shown
    cookies: dict[str, str] = field(default_factory=dict, repr=False)
    verify: bool | str = True
    metadata: dict[str, str] = field(default_factory=dict)
    timeout: float = 30.0
    retry_attempts: int = 5
    retry_max_wait: float = 10.0
    source: str = ""
    conn_id: str | None = None

    def __post_init__(self, token: str | None) -> None:
        self.address, self.source = self.address.rstrip("/"), self.source or self.address.rstrip("/")
        self.headers = {str(k): str(v) for k, v in self.headers.items()}
        if token and not any(k.lower() == "authorization" for k in self.headers):
            self.headers["Authorization"] = f"Bearer {token}"
        self._aio_session: aiohttp.ClientSession | None = None

    def secrets(self) -> list[str]:
        """The credential values this client sends (for a log masker)."""
        values = [v for k, v in self.headers.items() if k.lower() in SENSITIVE_HEADERS and v]
        values += [v.removeprefix("Bearer ") for k, v in self.headers.items() if k.lower() == "authorization"]
        return values + [v for v in self.cookies.values() if v]

    def _error(self, what: str, exc: BaseException) -> RayProviderError:
        """The provider's error for a call that failed for good."""
        if isinstance(exc, RayProviderError):
            return exc
        status = http_status(exc)
        if status is None:
            return RayDashboardUnreachableError(
                f"Ray dashboard {self.address} ({self.source}) did not answer {what} after "
                f"{self.retry_attempts} attempts: {type(exc).__name__}: {exc}. Check that the cluster is "
                "running and that the address and port are right.",
                url=self.address,
                conn_id=self.conn_id or self.source,
            )
        if "already exists" in str(exc):
            return RayJobAlreadyExistsError(f"{what}: a job with this submission id already exists",
                                            http_status=status, url=self.address)  # fmt: skip
        hint = " (check the Ray auth token)" if status in (401, 403) else ""
        return RayJobApiError(f"{what} answered {status}{hint}: {str(exc)[:300]}", http_status=status,
                              url=self.address)  # fmt: skip

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return tenacity.Retrying(**retry_policy(self.retry_attempts, max_wait=self.retry_max_wait))(call)
        except Exception as exc:
            raise self._error(what, exc) from exc

    def _find(self, what: str, call: Callable[[], T]) -> T | None:
        """:meth:`_call`, or ``None`` when the job does not exist (404)."""
        try:
            return self._call(what, call)
        except RayJobApiError as exc:
            if exc.http_status == 404:
                return None
            raise

    @cached_property
    def ray(self) -> JobSubmissionClient:
        """Ray's ``JobSubmissionClient`` for this cluster (imports ``ray``; checks the connection)."""
        with RAY_IMPORT:
            from ray.job_submission import JobSubmissionClient

        return self._call(
            f"GET {self.address}/api/version",
            lambda: JobSubmissionClient(
                self.address, headers=self.headers, cookies=self.cookies or None, verify=self.verify
            ),
        )

    def submit(self, spec: JobSpec, submission_id: str) -> str:
        """Submit ``spec`` under ``submission_id`` (a local ``working_dir`` is uploaded first); raises
        :class:`RayJobAlreadyExistsError` for an existing id, :class:`RayInvalidInputError` for arguments Ray
        refused."""
        kwargs = spec.submit_kwargs()
        kwargs["metadata"] = {**self.metadata, **spec.metadata} or None
        try:
            call = partial(self.ray.submit_job, submission_id=submission_id, **kwargs)
            return str(self._call(f"submit job {submission_id!r}", call))
        except RayProviderError as exc:
            if isinstance(exc.__cause__, (TypeError, ValueError)):
                raise RayInvalidInputError(f"Ray rejected the job's arguments: {exc.__cause__}") from exc
            raise

    def get_job(self, submission_id: str) -> JobState | None:
        """The job's state; ``None`` when no job has this id."""
        details = self._find(f"job {submission_id!r}", lambda: self.ray.get_job_info(submission_id))
        return JobState.from_api(details) if details is not None else None

    def get_logs(self, submission_id: str, *, or_none: bool = False) -> str | None:
        """The job's whole driver log so far; ``or_none``: ``None`` (logged) when it cannot be read."""
        try:
            text = self._call(f"log of job {submission_id!r}", lambda: self.ray.get_job_logs(submission_id))
            return str(text)
        except Exception as exc:
            if not or_none:
                raise
            log.info("Could not read the log of Ray job %s (yet): %s", submission_id, exc)
            return None

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; whether it was still running (``False`` for a job that does not exist)."""
        return bool(self._find(f"stop job {submission_id!r}", lambda: self.ray.stop_job(submission_id)))

    def list_jobs(self) -> list[JobState]:
        """Every submitted job the cluster knows (driver-only jobs, which have no submission id, left out)."""
        jobs = self._call("list jobs", self.ray.list_jobs)
        return [JobState.from_api(job) for job in jobs if getattr(job, "submission_id", None)]

    def get_json(self, path: str, params: dict[str, str] | None = None) -> Any:
        """``GET`` a read-only route of the dashboard (``/api/version``, ``/api/v0/nodes``, ...) as JSON;
        one request per call, so several threads may read at once (the usage record does)."""
        url = f"{self.address}/{path.lstrip('/')}"

        def once() -> Any:
            response = requests.get(url, params=params, headers=self.headers, cookies=self.cookies,
                                    verify=self.verify, timeout=self.timeout)  # fmt: skip
            if not response.ok:  # as Ray's own client words it: one rule reads both
                raise RuntimeError(f"Request failed with status code {response.status_code}: {response.text}")
            return response.json()

        return self._call(f"GET {url}", once)

    def reader(self, timeout: float = 10.0) -> JobClient:
        """This client for the usage record's reads: a short timeout and no retry (a slow dashboard costs
        the record, never the job)."""
        return replace(self, timeout=min(self.timeout, timeout), retry_attempts=1)

    def version(self) -> str:
        """The cluster's Ray version (``GET /api/version``: the dashboard answers with the token)."""
        return str(self.get_json("/api/version").get("ray_version", "?"))

    def _ssl(self) -> ssl.SSLContext | bool:
        if not isinstance(self.verify, str):
            return bool(self.verify)
        if os.path.isdir(self.verify):
            return ssl.create_default_context(capath=self.verify)
        return ssl.create_default_context(cafile=self.verify)

    async def _arequest(self, method: str, path: str, *, allow_404: bool = False) -> Any:
        if self._aio_session is None or self._aio_session.closed:
            self._aio_session = aiohttp.ClientSession(
                headers=self.headers, cookies=self.cookies, timeout=aiohttp.ClientTimeout(total=self.timeout),
                connector=aiohttp.TCPConnector(ssl=self._ssl(), limit=4),
            )  # fmt: skip
        session, url = self._aio_session, f"{self.address}{path}"

        async def once() -> Any:
            async with session.request(method, url) as response:
                if response.status == 404 and allow_404:
                    return None
                if response.status >= 300:
                    text = await response.text()
                    raise RuntimeError(f"Request failed with status code {response.status}: {text}")
                return await response.json(content_type=None)

        policy = retry_policy(self.retry_attempts, max_wait=self.retry_max_wait)
        try:
            return await tenacity.AsyncRetrying(**policy)(once)
        except Exception as exc:
            raise self._error(f"{method} {url}", exc) from exc

    async def aget_job(self, submission_id: str) -> JobState | None:
        """:meth:`get_job` without blocking the event loop."""
        body = await self._arequest("GET", f"/api/jobs/{submission_id}", allow_404=True)
        return JobState.from_api(body) if body is not None else None

    async def aget_logs(self, submission_id: str, *, or_none: bool = False) -> str | None:
        """:meth:`get_logs` without blocking the event loop."""
        try:
            return str((await self._arequest("GET", f"/api/jobs/{submission_id}/logs")).get("logs") or "")
        except Exception as exc:
            if not or_none:
                raise
            log.info("Could not read the log of Ray job %s (yet): %s", submission_id, exc)
            return None

    async def astop(self, submission_id: str) -> bool:
        """:meth:`stop` without blocking the event loop."""
        body = await self._arequest("POST", f"/api/jobs/{submission_id}/stop", allow_404=True)
        return bool(body and body.get("stopped"))

    async def aclose(self) -> None:
        """Close the async reader's HTTP session (a trigger's ``finally``)."""
        if self._aio_session is not None and not self._aio_session.closed:
            await self._aio_session.close()
        self._aio_session = None
