"""The usage record and OpenLineage of ``KubeRayJobOperator``: the RayJob's parts of docs/usage.md.

The record itself is made along the wait by :class:`~airflow_ray_provider.launch.RayJobUsage` (in the
worker or in the triggerer); this mixin holds the operator's side: the plan it needs (prices checked
against the cluster KubeRay will make, or the standing one), looking on for the teardown, publishing
the record (XCom ``usage``, ``usage.json``, the log line), a record on kill, and the OpenLineage facets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_ray_provider.clusters import DEFAULT_TTL_SECONDS
from airflow_ray_provider.launch import TEARDOWN_WAIT_S, RayJobUsagePlan
from airflow_ray_provider.launch.usage import parse_prices
from airflow_ray_provider.operators.job_usage import (
    check_prices_on_spec,
    connection_prices,
    entrypoint_request,
    publish_usage,
)
from airflow_ray_provider.operators.lineage import JobIO, RayRun, job_io_of, operator_lineage

if TYPE_CHECKING:
    from airflow_ray_provider.clusters import RayClusterHandle, RayJobPlan, RayJobRequest


class RayJobUsageMixin:
    """Usage and lineage of a RayJob task (mixed into ``KubeRayJobOperator``, which sets the fields)."""

    # set by the operator
    log: Any
    poll_interval: float
    record_usage: bool
    prices: Any
    cluster_conn_id: str | None
    entrypoint: Any
    entrypoint_num_cpus: Any
    entrypoint_num_gpus: Any
    entrypoint_resources: Any
    artifact_uri: str | None
    lineage_inputs: tuple[str, ...]
    lineage_outputs: tuple[str, ...]
    _watch: Any
    _usage_record: dict[str, Any] | None
    _final: Any
    _context: Any
    _dashboard_url: str | None

    # ----------------------------------------------------------------- usage and lineage
    def _usage_plan(self, plan: RayJobPlan, request: RayJobRequest) -> RayJobUsagePlan | None:
        """What the usage record needs (``None`` with ``record_usage=False``); prices checked against
        the spec of a cluster KubeRay will make."""
        if not self.record_usage:
            return None
        own = plan.standing_cluster is None
        prices = self.prices or connection_prices(self.cluster_conn_id)
        if prices is not None and own and request.spec is not None:
            check_prices_on_spec(prices, request.spec)
        options = request.options
        ttl = options.ttl_seconds_after_finished
        effective_ttl = DEFAULT_TTL_SECONDS if ttl is None else ttl
        wait, note = 0.0, None
        if not own:
            note = "a standing cluster (clusterSelector) is never deleted by KubeRay or the provider"
        elif not options.shutdown_after_job_finishes or options.deletion_rules:
            note = (
                "the cluster is deleted by deletion_rules or not at all (shutdown_after_job_finishes=False)"
            )
        elif effective_ttl > 0:
            note = (
                f"KubeRay deletes the cluster ttlSecondsAfterFinished={effective_ttl} s after the job; "
                "the task does not wait for it (its cost then is not in reserved)"
            )
        else:
            wait = TEARDOWN_WAIT_S
            note = f"the cluster was not gone within {TEARDOWN_WAIT_S:g} s of KubeRay's verdict"
        entrypoint = entrypoint_request(
            self.entrypoint_num_cpus, self.entrypoint_num_gpus, None, self.entrypoint_resources
        )
        return RayJobUsagePlan(
            own_cluster=own, entrypoint=entrypoint, prices=prices.to_dict() if prices else None,
            teardown_wait=wait, teardown_note=note,
        )  # fmt: skip

    def _check_prices_on_standing(
        self, standing: RayClusterHandle | None, usage: RayJobUsagePlan | None
    ) -> None:
        """A standing cluster answers already: check the prices against its nodes, as the Job API path."""
        prices = parse_prices(usage.prices) if usage is not None else None
        if standing is None or prices is None:
            return
        from airflow_ray_provider.hooks.ray_job import RayJobHook
        from airflow_ray_provider.launch.usage import check_prices_on_cluster

        why = check_prices_on_cluster(RayJobHook(None, cluster=standing.to_dict()).dashboard_state(), prices)
        if why:
            self.log.warning("Could not check the prices against the cluster's resources: %s", why)

    def _publish_usage(self, record: dict[str, Any] | None) -> None:
        self._usage_record = record or None
        if record and self.record_usage:
            ti = self._context["ti"] if self._context is not None else None
            publish_usage(record, ti=ti, artifact_uri=self.job_io().artifact_uri, log=self.log)

    def job_io(self) -> JobIO:
        """What the job reads and writes: its workload's URIs plus ``lineage_inputs``/``lineage_outputs``."""
        return job_io_of(
            self.entrypoint,
            inputs=self.lineage_inputs,
            outputs=self.lineage_outputs,
            artifact_uri=self.artifact_uri,
        )

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the job's inputs and outputs, and the ``rayJob`` run facet (mode ``rayjob``)."""
        record = self._usage_record or {}
        status = self._final
        run = RayRun(
            mode="rayjob",
            submission_id=(status.job_id if status else None) or record.get("submission_id"),
            ray_job_id=record.get("ray_job_id"),
            cluster=(status.cluster_name if status else None) or record.get("cluster"),
            dashboard_url=self._dashboard_url,
            usage=self._usage_record,
        )
        return operator_lineage(self.job_io(), run)

    def _record_on_kill(self) -> None:
        """A kill while the job runs: a record of what could be read (before KubeRay removes the cluster)."""
        watch = self._watch
        if watch is None or watch.record or watch.last is None or not watch.last.status.job_id:
            return
        watch.collect_usage(watch.last, "killed")
        self._publish_usage(watch.record)
