"""The :class:`~airflow_ray_provider.launch.run.RunTarget` of every job that goes through the Ray Job API
(a KubeRay RayJob is the other kind, :mod:`.rayjob`), and the wait until a cluster answers (the blocking
one here; the trigger's drives the same :func:`readiness_rule`). No Airflow imports.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from airflow_ray_provider.clusters import event_for
from airflow_ray_provider.exceptions import RayClusterNotReadyError
from airflow_ray_provider.jobs.client import JobClient, JobState
from airflow_ray_provider.jobs.outcome import dashboard_job_url, job_result, raise_for_state
from airflow_ray_provider.jobs.submission import Choice, submit_or_attach
from airflow_ray_provider.launch.run import Observation, RunTarget, poll

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import (
        ClusterBackend,
        ClusterPlan,
        RayClusterHandle,
        ReadinessCheck,
        ReadinessEvent,
    )
    from airflow_ray_provider.jobs.submission import JobSpec
    from airflow_ray_provider.launch.pool import PoolLease

log = logging.getLogger(__name__)

#: Why a usage record has no ``teardown_s``, by the cluster's kind (the one-task operator measures it).
TEARDOWN_NOTES = {
    "ephemeral": "the run's teardown task (delete_cluster) deletes the cluster after this record",
    "standing": "a standing cluster is never deleted by the provider",
    "one_task": "the task kept its cluster (cleanup), or deleting it failed",
    "pool": "a pool's cluster stays for its idle TTL after its last lease",
}


def observed(state: JobState | None, text: str | None) -> Observation:
    """An observation of a Job API job (``None``: not found)."""
    if state is None:
        return Observation(time.time())
    return Observation(time.time(), state, state.is_terminal, state.is_success, text)


@dataclasses.dataclass(eq=False, kw_only=True)
class ClusterTarget(RunTarget):
    """The Job API of one Ray cluster: given ready (``client``), another task's (``handle``), attached by
    name (``standing``, never deleted), or created for the run (``plan``: the run owns it), through
    ``backend``.

    :param pool: with ``plan`` (the pool's cluster) and ``spec`` (its fingerprint), all three made by
        :func:`~.pool.cluster_target`: the run leases the pool's cluster, renews the lease at every look,
        and releases it at its end; cleanup never deletes the cluster.
    :param owned: cleanup may delete the cluster (set with ``plan``, or with the handle of one the
        run created before a deferral).
    :param dashboard_url: the dashboard as people reach it (default: the handle's, else the client's).
    :param face_ref: how the face makes this target again after a deferral (JSON, no secret).
    :param retry_attempts: attempts per Job API call of the client the backend makes for the handle.
    """

    client: JobClient | None = None
    handle: RayClusterHandle | None = None
    backend: ClusterBackend | None = None
    plan: ClusterPlan | None = None
    standing: str | None = None
    pool: PoolLease | None = None
    spec: dict[str, str] = dataclasses.field(default_factory=dict)
    owned: bool = False
    ready_timeout: float = 900.0
    delete_timeout: float = 300.0
    dashboard_url: str | None = None
    face_ref: dict[str, Any] = dataclasses.field(default_factory=dict)
    retry_attempts: int = 5
    #: From the instant the run starts creating its cluster, :meth:`delete` deletes by the plan's name.
    creating: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self) -> None:
        self.owned = self.owned or (self.plan is not None and self.pool is None)
        client_url = self.client.address if self.client else None
        self.dashboard_url = self.dashboard_url or (self.handle.link_url if self.handle else client_url)

    def _backend(self) -> ClusterBackend:
        assert self.backend is not None, "a target given a ready client has no cluster backend"
        return self.backend

    def ref(self) -> dict[str, Any]:
        """The face's reference, with the handle once known (its token stays where it is)."""
        handle = self.handle.to_dict() if self.handle is not None else None
        pool = self.pool.ref() if self.pool is not None else {}
        return {**self.face_ref, **pool, "handle": handle, "owned": self.owned}

    def reach(self, say: Callable[[str], None]) -> None:
        """Create (or find) the run's cluster and wait until it answers, or attach the standing one."""
        if self.client is not None:
            return
        if self.pool is not None and self.plan is not None and self.handle is None:
            self.handle = self.pool.acquire(self.plan, self.spec, timeout=self.ready_timeout, say=say)
        elif self.plan is not None and self.handle is None:
            self.creating, backend = True, self._backend()
            created = backend.ensure(self.plan)
            say(f"{'Started' if created else 'Re-attached to'} Ray cluster {self.plan.name}")
            self.handle = wait_until_ready(backend, self.plan, timeout=self.ready_timeout, poll_interval=2.0)
        elif self.handle is None:
            self.handle = self._backend().attach(self.standing or "")
            say(f"Attached to standing Ray cluster {self.handle.name} ({self.handle.backend}); never deleted")
        self._client()
        self.dashboard_url = self.dashboard_url or self.handle.link_url

    def _client(self) -> JobClient:
        if self.client is None:
            assert self.handle is not None, "the cluster is not reached yet"
            self.client = self._backend().job_client(self.handle, retry_attempts=self.retry_attempts)
        return self.client

    def submit(self, job: JobSpec, base_id: str) -> tuple[Choice, str, Any]:
        """Submit by the re-attach rule: a live or succeeded job of this run is found, never duplicated."""
        client = self._client()
        decision = submit_or_attach(base_id, client.list_jobs, lambda sid: client.submit(job, sid))
        return decision.choice, decision.submission_id, decision.state

    def look(self, submission_id: str, *, with_log: bool) -> Observation:
        """One look: the job's state and, when streaming, its log (a pool's lease renewed when due)."""
        if self.pool is not None:
            self.pool.heartbeat()
        state = self._client().get_job(submission_id)
        text = self._client().get_logs(submission_id) if state is not None and with_log else None
        return observed(state, text)

    async def alook(self, submission_id: str, *, with_log: bool) -> Observation:
        """One look through the async reader (a pool's lease renewed in a thread when due)."""
        if self.pool is not None:
            await asyncio.to_thread(self.pool.heartbeat)
        state = await self._client().aget_job(submission_id)
        text = await self._client().aget_logs(submission_id) if state is not None and with_log else None
        return observed(state, text)

    def stop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job."""
        return self._client().stop(submission_id)

    async def astop(self, submission_id: str) -> bool:
        """Ask Ray to stop the job, from an event loop."""
        return await self._client().astop(submission_id)

    def dashboard(self) -> JobClient | None:
        """The cluster's client."""
        return self._client()

    def logs(self, submission_id: str) -> str:
        """The job's log, ``""`` when it cannot be read."""
        return self._client().get_logs(submission_id, or_none=True) or ""

    def result(self, subject: JobState, logs: Callable[[], str], tail_lines: int) -> dict[str, Any]:
        """``{"submission_id", "status", "dashboard_url", "job_url"}``; raises for FAILED or STOPPED."""
        if not subject.is_success:
            raise_for_state(subject, logs(), tail_lines=tail_lines)
        return job_result(subject, self.dashboard_url or self._client().address)

    def link(self, submission_id: str) -> str | None:
        """The job's page; for a cluster deleted when its run is done the link says so with
        ``?ray_cluster=<name>&ephemeral=deleted-when-done`` (the dashboard ignores the query)."""
        if not self.dashboard_url:
            return None
        url = dashboard_job_url(self.dashboard_url, submission_id)
        cluster = self.handle or self.plan
        if cluster is None or (self.handle is not None and not self.handle.owned and not self.owned):
            return url
        base, _, fragment = url.partition("#")
        query = urlencode({"ray_cluster": cluster.name, "ephemeral": "deleted-when-done"})
        return f"{base.rstrip('/')}/?{query}#{fragment}"

    def restore(self, data: dict[str, Any]) -> JobState:
        """A handed-over state of the job."""
        return JobState.from_api(data)

    def delete(self, say: Callable[[str], None]) -> bool:
        """Delete the run's own cluster, also one still starting; never a cluster the run did not create."""
        what = self.handle if self.handle is not None else self.plan if self.creating else None
        if not self.owned or what is None:
            return False
        existed = self._backend().delete(what, wait=True, timeout=self.delete_timeout)
        say(f"Deleted Ray cluster {what.name}" if existed else f"Ray cluster {what.name} was already gone")
        return existed

    def release(self, say: Callable[[str], None]) -> None:
        """End the pool's lease (the pool's cluster stays for its idle TTL)."""
        if self.pool is not None:
            self.pool.release(say)

    def usage_facts(self) -> tuple[str, str, bool, str, str | None]:
        """The mode is the cluster's kind (``pool``: leased; ``one_task``: the run's own; ``ephemeral``: a DAG
        task's; ``standing``); the connection is the ``ray`` one."""
        handle, conn_id = self.handle, self.face_ref.get("ray_conn_id")
        name = handle.name if handle else self.plan.name if self.plan else str(conn_id)
        other = "ephemeral" if handle is not None and handle.owned else "standing"
        kind = "pool" if self.pool is not None else "one_task" if self.owned else other
        own = kind in ("one_task", "ephemeral")
        return kind, name, own, TEARDOWN_NOTES[kind], conn_id or (handle.conn_id if handle else None)

    def prices(self) -> dict[str, Any] | None:
        """The pool's price table, kept in its record (``None`` off a pool, or a pool without one)."""
        return self.pool.prices if self.pool is not None else None

    def keep(self, say: Callable[[str], None]) -> None:
        """Say that the run's own cluster is kept."""
        what = self.handle or self.plan
        if what is not None:
            say(f"Kept Ray cluster {what.name}; the janitor deletes it after its expiry")


def ready_handle(backend: ClusterBackend, plan: ClusterPlan, event: ReadinessEvent) -> RayClusterHandle:
    """The handle of a cluster whose wait ended ``ready``; else :class:`RayClusterNotReadyError` with its
    conditions (the caller's cleanup deletes what it created)."""
    if event["status"] != "ready" or not event["dashboard_url"]:
        message = event["message"] or f"Ray cluster {plan.name} is not ready ({event['status']})"
        raise RayClusterNotReadyError(message, name=plan.name, namespace=plan.namespace,
                                      conditions=event["conditions"])  # fmt: skip
    return backend.handle(plan, event["dashboard_url"])


def readiness_rule(
    check: ReadinessCheck, *, started: float, timeout: float, logger: Any = log
) -> ReadinessEvent | None:
    """The decision after one readiness look (the blocking wait's and the trigger's): its event, or
    ``None`` (logged) while the cluster is not ready and ``timeout`` seconds from epoch ``started`` last."""
    event = event_for(check, waited=time.time() - started, timeout=timeout)
    if event is None:
        logger.info("%s not ready yet: %s", check.cluster, check.message)
    return event


def wait_until_ready(
    backend: ClusterBackend,
    plan: ClusterPlan,
    *,
    timeout: float,
    poll_interval: float,
    on_look: Callable[[], None] = lambda: None,
) -> RayClusterHandle:
    """Look until the cluster answers, fails, or ``timeout`` seconds pass; its handle (see
    :func:`ready_handle`). ``on_look`` runs before each look (a pool's heartbeat)."""

    def look() -> ReadinessCheck:
        on_look()
        return backend.check(plan)

    decide = partial(readiness_rule, started=time.time(), timeout=timeout)
    return ready_handle(backend, plan, poll(look, decide, interval=poll_interval))
