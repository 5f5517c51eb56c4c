"""``RayJobHook``: the ``ray`` connection type and the Ray Job API, sync (workers) and async (triggerer).

* Sync: job submission goes through Ray's ``JobSubmissionClient`` (it packages and uploads a local
  ``working_dir`` / ``py_modules``), built lazily because its constructor calls the cluster. Reads,
  stops and lists go straight to the REST API with ``requests``.
* Async: ``aiohttp`` against the same REST routes, so the triggerer never blocks its event loop and
  never imports ``ray``.

Both transports are thin shells around the pure functions of :mod:`.ray_api` (URLs, headers,
status handling) and share one retry policy (:mod:`.retry`): connection errors, 429 and 5xx are
retried with exponential back-off; other 4xx fail at once. A dashboard that stays unreachable raises
:class:`~airflow_ray_provider.exceptions.RayDashboardUnreachableError` naming the URL and the
connection or cluster handle.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from functools import cached_property
from typing import TYPE_CHECKING, Any

import tenacity
from airflow.sdk import BaseHook

from airflow_ray_provider.clusters.handle import RayClusterHandle
from airflow_ray_provider.exceptions import (
    RayDashboardUnreachableError,
    RayInvalidInputError,
    RayJobAlreadyExistsError,
    RayJobApiError,
    RayProviderError,
)
from airflow_ray_provider.hooks.ray_api import api_url, check_response, job_path, parse_json
from airflow_ray_provider.hooks.ray_connection import (
    UI_FIELD_BEHAVIOUR,
    RayApiConfig,
    config_from_connection,
    config_from_handle,
    read_handle_token,
)
from airflow_ray_provider.hooks.retry import is_transient_ray_api_error, retry_kwargs
from airflow_ray_provider.jobs.log_stream import LOG_PREFIX
from airflow_ray_provider.jobs.status import JobState

if TYPE_CHECKING:
    import aiohttp
    import requests
    from ray.job_submission import JobSubmissionClient

    from airflow_ray_provider.jobs.submission import JobSpec
    from airflow_ray_provider.launch.usage import DashboardState


def parse_job(body: str, url: str) -> JobState:
    """Parse ``GET /api/jobs/{id}``."""
    return JobState.from_api(parse_json(body, url))


def parse_job_list(body: str, url: str) -> list[JobState]:
    """Parse ``GET /api/jobs/``; driver-only jobs (no submission id) are left out."""
    return [JobState.from_api(item) for item in parse_json(body, url) if item.get("submission_id")]


def parse_logs(body: str, url: str) -> str:
    """Parse ``GET /api/jobs/{id}/logs``."""
    return str(parse_json(body, url).get("logs") or "")


def parse_stopped(body: str, url: str) -> bool:
    """Parse ``POST /api/jobs/{id}/stop``: whether the job was still running."""
    return bool(parse_json(body, url).get("stopped"))


def emit_lines(log: logging.Logger | Any, lines: list[str]) -> None:
    """Write job-log lines read through the hook into the task log, one record per line.

    Each line goes through Airflow's secrets masker here, not only in the log pipeline: a job that
    prints the token (or a cookie) is masked even where no masking log processor is configured
    (``dag.test()``, a bare triggerer test).

    :param log: the task's (or trigger's) logger.
    :param lines: complete lines, without line endings (:func:`~airflow_ray_provider.jobs.new_log_lines`).
    """
    if not lines:
        return
    from airflow.sdk.log import redact

    for line in lines:
        log.info("%s%s", LOG_PREFIX, redact(line))


class RayJobHook(BaseHook):
    """Talk to a Ray cluster's Job API, given a ``ray`` connection or a cluster handle.

    ``__init__`` does no I/O: the connection, the token and the clients are resolved on first use.

    :param ray_conn_id: a ``ray`` connection (dashboard URL, token, headers, cookies, TLS, metadata).
    :param cluster: a cluster handle (``RayClusterHandle`` or its dict, e.g. the create-cluster XCom);
        used instead of the connection when given.
    :param retry_attempts: attempts per API call on transient failures (1 = no retry).
    :param retry_max_wait: longest back-off between attempts, in seconds.
    """

    conn_name_attr = "ray_conn_id"
    default_conn_name = "ray_default"
    conn_type = "ray"
    hook_name = "Ray (Job API)"

    def __init__(
        self,
        ray_conn_id: str | None = default_conn_name,
        *,
        cluster: RayClusterHandle | dict[str, Any] | None = None,
        retry_attempts: int = 5,
        retry_max_wait: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ray_conn_id = ray_conn_id
        self.cluster = RayClusterHandle.from_dict(cluster) if cluster is not None else None
        self.retry_attempts = retry_attempts
        self.retry_max_wait = retry_max_wait
        self._aio_session: aiohttp.ClientSession | None = None

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Connection form behaviour (also declared as ``ui-field-behaviour`` in provider info)."""
        return {
            "hidden_fields": list(UI_FIELD_BEHAVIOUR["hidden-fields"]),
            "relabeling": dict(UI_FIELD_BEHAVIOUR["relabeling"]),
            "placeholders": dict(UI_FIELD_BEHAVIOUR["placeholders"]),
        }

    # ----------------------------------------------------------------- configuration
    @cached_property
    def config(self) -> RayApiConfig:
        """The resolved connection or cluster handle; its secrets are registered with the masker."""
        config = self._resolve_config()
        from airflow.sdk.log import mask_secret

        for secret in config.secrets():
            mask_secret(secret)
        return config

    def _resolve_config(self) -> RayApiConfig:
        if self.cluster is not None:
            try:
                token = read_handle_token(self.cluster)
            except OSError as exc:
                raise RayProviderError(
                    f"cannot read the Ray auth token of cluster handle {self.cluster.name!r}: {exc}"
                ) from exc
            return config_from_handle(self.cluster, token)
        if not self.ray_conn_id:
            raise RayInvalidInputError("pass a `ray` connection id (ray_conn_id) or a cluster handle")
        from airflow.exceptions import AirflowNotFoundException

        try:
            conn = self.get_connection(self.ray_conn_id)
        except AirflowNotFoundException as exc:
            raise RayInvalidInputError(
                f"connection {self.ray_conn_id!r} is not defined; create a `ray` connection with the "
                "dashboard URL as Host and the Ray auth token as Password"
            ) from exc
        return config_from_connection(conn)

    def _unreachable(self, url: str, exc: BaseException) -> RayDashboardUnreachableError:
        config = self.config
        return RayDashboardUnreachableError(
            f"Ray dashboard {config.dashboard_url} ({config.source}) did not answer {url} after "
            f"{self.retry_attempts} attempts: {type(exc).__name__}: {exc}. Check that the cluster is "
            "running and that the URL and port are right.",
            url=config.dashboard_url,
            conn_id=self.ray_conn_id if self.cluster is None else config.source,
        )

    def _retrying(self) -> tenacity.Retrying:
        return tenacity.Retrying(**retry_kwargs(self.retry_attempts, max_wait=self.retry_max_wait))

    # ----------------------------------------------------------------- sync transport
    @cached_property
    def client(self) -> JobSubmissionClient:
        """Ray's ``JobSubmissionClient`` (imports ``ray``; its constructor calls ``/api/version``)."""
        from ray.job_submission import JobSubmissionClient

        config = self.config
        try:
            return self._retrying()(
                JobSubmissionClient,
                config.dashboard_url,
                headers=config.request_headers(),
                cookies=config.cookies or None,
                verify=config.verify,
            )
        except Exception as exc:
            if is_transient_ray_api_error(exc):
                raise self._unreachable(config.dashboard_url, exc) from exc
            raise RayProviderError(f"cannot connect to the Ray Job API ({config.source}): {exc}") from exc

    @cached_property
    def _session(self) -> requests.Session:
        import requests

        session = requests.Session()
        session.headers.update(self.config.request_headers())
        session.cookies.update(self.config.cookies)
        session.verify = self.config.verify
        return session

    def _call(self, method: str, path: str, *, allow_404: bool = False) -> tuple[bool, str, str]:
        """One REST call with retries. Returns ``(found, body, url)``; ``found`` is False on allowed 404."""
        url = api_url(self.config.dashboard_url, path)

        def once() -> tuple[bool, str, str]:
            resp = self._session.request(method, url, timeout=self.config.request_timeout)
            return check_response(resp.status_code, resp.text, url, allow_404=allow_404), resp.text, url

        try:
            return self._retrying()(once)
        except Exception as exc:
            if is_transient_ray_api_error(exc) and not isinstance(exc, RayJobApiError):
                raise self._unreachable(url, exc) from exc
            raise

    def get_version(self) -> dict[str, Any]:
        """``GET /api/version``: the cluster's Ray version and session name."""
        _, body, url = self._call("GET", "/api/version")
        return dict(parse_json(body, url))

    def test_connection(self) -> tuple[bool, str]:
        """Check the connection from the Airflow UI: ``GET /api/version`` with the token."""
        try:
            version = self.get_version()
        except Exception as exc:
            return False, str(exc)
        return True, f"Connected to Ray {version.get('ray_version')} at {self.config.dashboard_url}"

    def dashboard_state(self) -> DashboardState:
        """The cluster's read-only state API (for the usage record), with this hook's token, cookies and
        TLS settings and a short timeout: a slow dashboard costs the record, never the job."""
        from airflow_ray_provider.launch.usage import DashboardState

        config = self.config
        return DashboardState(
            config.dashboard_url,
            headers=config.request_headers(),
            cookies=dict(config.cookies),
            verify=config.verify,
            timeout=min(config.request_timeout, 10.0),
        )

    def get_job(self, submission_id: str) -> JobState | None:
        """The job's state, or ``None`` when no job has this id."""
        found, body, url = self._call("GET", job_path(submission_id), allow_404=True)
        return parse_job(body, url) if found else None

    def get_job_logs(self, submission_id: str) -> str:
        """The job's whole driver log so far."""
        _, body, url = self._call("GET", job_path(submission_id, "logs"))
        return parse_logs(body, url)

    def stop_job(self, submission_id: str) -> bool:
        """Ask Ray to stop the job. Returns whether it was still running (``False`` if unknown)."""
        found, body, url = self._call("POST", job_path(submission_id, "stop"), allow_404=True)
        return parse_stopped(body, url) if found else False

    def list_jobs(self) -> list[JobState]:
        """Every submitted job the cluster knows (``ray job list``)."""
        _, body, url = self._call("GET", "/api/jobs/")
        return parse_job_list(body, url)

    def submit_job(self, spec: JobSpec, submission_id: str) -> str:
        """Submit a job under ``submission_id`` (a local ``working_dir`` is uploaded first).

        :raises RayJobAlreadyExistsError: when a job with this id exists (re-attach to it).
        """
        kwargs = spec.submit_kwargs()
        kwargs["metadata"] = {**self.config.metadata, **spec.metadata}
        try:
            return str(self._retrying()(self.client.submit_job, submission_id=submission_id, **kwargs))
        except RuntimeError as exc:
            url = api_url(self.config.dashboard_url, "/api/jobs/")
            if "already exists" in str(exc):
                raise RayJobAlreadyExistsError(
                    f"a Ray job with submission id {submission_id!r} already exists", http_status=500, url=url
                ) from exc
            if is_transient_ray_api_error(exc):
                raise self._unreachable(url, exc) from exc
            raise RayProviderError(f"Ray rejected job {submission_id!r}: {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise RayInvalidInputError(f"Ray rejected the job's arguments: {exc}") from exc
        except (ConnectionError, OSError) as exc:
            raise self._unreachable(self.config.dashboard_url, exc) from exc

    # ----------------------------------------------------------------- async transport
    async def aconfig(self) -> RayApiConfig:
        """Resolve :attr:`config` off the event loop (connection lookup and token reads are sync I/O)."""
        if "config" in self.__dict__:
            return self.config
        return await asyncio.to_thread(lambda: self.config)

    def _ssl(self, verify: bool | str) -> ssl.SSLContext | bool:
        """aiohttp's ``ssl=``: ``True`` (default verification), ``False`` (none) or a CA context."""
        if isinstance(verify, str):
            import os

            if os.path.isdir(verify):
                return ssl.create_default_context(capath=verify)
            return ssl.create_default_context(cafile=verify)
        return bool(verify)

    async def _aio(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._aio_session is None or self._aio_session.closed:
            config = await self.aconfig()
            self._aio_session = aiohttp.ClientSession(
                headers=config.request_headers(),
                cookies=config.cookies,
                connector=aiohttp.TCPConnector(ssl=self._ssl(config.verify), limit=4),
                timeout=aiohttp.ClientTimeout(total=config.request_timeout),
            )
        return self._aio_session

    async def _acall(self, method: str, path: str, *, allow_404: bool = False) -> tuple[bool, str, str]:
        """Async twin of :meth:`_call`'s transport only; the rules are the shared pure functions."""
        config = await self.aconfig()
        session = await self._aio()
        url = api_url(config.dashboard_url, path)

        async def once() -> tuple[bool, str, str]:
            async with session.request(method, url) as resp:
                body = await resp.text()
                return check_response(resp.status, body, url, allow_404=allow_404), body, url

        retrying = tenacity.AsyncRetrying(**retry_kwargs(self.retry_attempts, max_wait=self.retry_max_wait))
        try:
            return await retrying(once)
        except Exception as exc:
            if is_transient_ray_api_error(exc) and not isinstance(exc, RayJobApiError):
                raise self._unreachable(url, exc) from exc
            raise

    async def aget_job(self, submission_id: str) -> JobState | None:
        """Async :meth:`get_job`."""
        found, body, url = await self._acall("GET", job_path(submission_id), allow_404=True)
        return parse_job(body, url) if found else None

    async def aget_job_logs(self, submission_id: str) -> str:
        """Async :meth:`get_job_logs`."""
        _, body, url = await self._acall("GET", job_path(submission_id, "logs"))
        return parse_logs(body, url)

    async def astop_job(self, submission_id: str) -> bool:
        """Async :meth:`stop_job`."""
        found, body, url = await self._acall("POST", job_path(submission_id, "stop"), allow_404=True)
        return parse_stopped(body, url) if found else False

    async def aclose(self) -> None:
        """Close the aiohttp session (call from the trigger's ``finally``)."""
        if self._aio_session is not None and not self._aio_session.closed:
            await self._aio_session.close()
        self._aio_session = None
