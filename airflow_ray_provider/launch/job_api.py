"""A Job API client without Airflow, for the ``airflow-ray`` CLI and :func:`airflow_ray_provider.launch.run`.

Reads, stops and lists go to the Job API's REST routes with ``requests``; a submission goes through Ray's
own ``JobSubmissionClient`` (it packages and uploads a local ``working_dir``). It has the methods of
:class:`~airflow_ray_provider.launch.ray_job.JobApi`, as the Airflow hook does, so the lifecycle drives
either one. Ray's token auth: the token travels as ``Authorization: Bearer <token>``.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow_ray_provider.exceptions import (
    RayDashboardUnreachableError,
    RayJobAlreadyExistsError,
    RayJobApiError,
    RayProviderError,
)
from airflow_ray_provider.jobs.status import JobState

if TYPE_CHECKING:
    import requests
    from ray.job_submission import JobSubmissionClient

    from airflow_ray_provider.jobs.submission import JobSpec

#: Where Ray's own tools look for a token when ``RAY_AUTH_TOKEN`` is not set (``ray get-auth-token``).
DEFAULT_TOKEN_PATH = Path("~/.ray/auth_token")


def ray_token_from_environment() -> str | None:
    """The token Ray's own tools use: ``$RAY_AUTH_TOKEN``, else the file ``$RAY_AUTH_TOKEN_PATH`` or
    ``~/.ray/auth_token``; ``None`` when there is none."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return os.environ["RAY_AUTH_TOKEN"].strip()
    path = Path(os.environ.get("RAY_AUTH_TOKEN_PATH") or DEFAULT_TOKEN_PATH).expanduser()
    return path.read_text().strip() if path.is_file() else None


class JobApiClient:
    """The Job API of one cluster.

    :param dashboard_url: the dashboard's base URL, e.g. ``http://127.0.0.1:8265``.
    :param token: the Ray auth token (``None``: the cluster has no token auth).
    :param request_timeout: seconds per HTTP request.
    """

    def __init__(
        self, dashboard_url: str, *, token: str | None = None, request_timeout: float = 30.0
    ) -> None:
        self.dashboard_url = dashboard_url.rstrip("/")
        self.token = token
        self.request_timeout = request_timeout

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    @cached_property
    def _session(self) -> requests.Session:
        import requests

        session = requests.Session()
        session.headers.update(self._headers())
        return session

    def _call(self, method: str, path: str, *, allow_404: bool = False) -> Any:
        import requests

        url = f"{self.dashboard_url}{path}"
        try:
            resp = self._session.request(method, url, timeout=self.request_timeout)
        except requests.RequestException as exc:
            raise RayDashboardUnreachableError(
                f"Ray dashboard {self.dashboard_url} did not answer {url}: {exc}. Check that the cluster is "
                "running and that the address and port are right.",
                url=self.dashboard_url,
            ) from exc
        if resp.status_code == 404 and allow_404:
            return None
        if not 200 <= resp.status_code < 300:
            hint = " (check the Ray auth token)" if resp.status_code in (401, 403) else ""
            raise RayJobApiError(
                f"{method} {url} answered {resp.status_code}{hint}: {resp.text[:300]}",
                http_status=resp.status_code,
                url=url,
            )
        return resp.json()

    def version(self) -> dict[str, Any]:
        """``GET /api/version``."""
        return dict(self._call("GET", "/api/version"))

    def get_job(self, submission_id: str) -> JobState | None:
        """The job's state, or ``None`` when no job has this id."""
        body = self._call("GET", f"/api/jobs/{quote(submission_id, safe='')}", allow_404=True)
        return JobState.from_api(body) if body is not None else None

    def get_job_logs(self, submission_id: str) -> str:
        """The job's whole driver log so far."""
        body = self._call("GET", f"/api/jobs/{quote(submission_id, safe='')}/logs")
        return str(body.get("logs") or "")

    def stop_job(self, submission_id: str) -> bool:
        """Ask Ray to stop the job; whether it was still running."""
        body = self._call("POST", f"/api/jobs/{quote(submission_id, safe='')}/stop", allow_404=True)
        return bool(body and body.get("stopped"))

    def list_jobs(self) -> list[JobState]:
        """Every submitted job the cluster knows."""
        return [
            JobState.from_api(item) for item in self._call("GET", "/api/jobs/") if item.get("submission_id")
        ]

    @cached_property
    def _ray_client(self) -> JobSubmissionClient:
        from ray.job_submission import JobSubmissionClient

        return JobSubmissionClient(self.dashboard_url, headers=self._headers())

    def submit_job(self, spec: JobSpec, submission_id: str) -> str:
        """Submit under ``submission_id`` (a local ``working_dir`` is uploaded first).

        :raises RayJobAlreadyExistsError: when a job with this id exists (re-attach to it).
        """
        try:
            return str(self._ray_client.submit_job(submission_id=submission_id, **spec.submit_kwargs()))
        except RuntimeError as exc:
            if "already exists" in str(exc):
                raise RayJobAlreadyExistsError(
                    f"a Ray job with submission id {submission_id!r} already exists",
                    http_status=500,
                    url=f"{self.dashboard_url}/api/jobs/",
                ) from exc
            raise RayProviderError(f"Ray rejected job {submission_id!r}: {exc}") from exc
