"""The steps of the per-zone training template and their wiring (see :mod:`.factory`).

Arguments that come from an upstream task are annotated ``XComArg | <value>``: the wiring passes the
upstream output, the step receives its value (:func:`~airflow_ray_provider.templates.common.resolved`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.sdk import task, task_group
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator
from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator, SubmitRayJobOperator
from airflow_ray_provider.templates.collect import CollectZoneTrainingOperator
from airflow_ray_provider.templates.common import (
    ClusterSettings,
    create_cluster_task,
    delete_cluster_task,
    ray_job_task,
    resolved,
    setup_task,
    teardown_task,
    upstream,
    workload_entrypoint,
)
from airflow_ray_provider.templates.zone_training.application import ZoneApplication

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator, XComArg

log = logging.getLogger(__name__)

ZONE_MODULE = "airflow_ray_provider.workloads.zone_training"
RETRY_FOLDER = "retry-1"


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"


def _run_info(context: dict[str, Any], application: str) -> dict[str, Any]:
    ti = context["ti"]
    return {
        "dag_id": ti.dag_id,
        "run_id": ti.run_id,
        "task_id": ti.task_id,
        "map_index": ti.map_index,
        "logical_date": str(context.get("logical_date")),
        "application": application,
    }


@task(task_id="plan", multiple_outputs=True)
def plan(
    app: dict[str, Any],
    output_uri: str,
    python: str,
    runtime_env: dict[str, Any] | None,
    cluster_spec: dict[str, Any] | None = None,
    **context: Any,
) -> dict[str, Any]:
    """Resolve one application: its artifact folder, job config and entrypoint (Jinja rendered here)."""
    render = context["task"].render_template
    application = ZoneApplication(**{**app, "data_uri": render(app["data_uri"], context)})
    prepare = render(list(application.prepare_entrypoint or ()), context) or [python, "-c", "pass"]
    artifact_uri = _join(render(output_uri, context), application.name)
    config = application.training_config(artifact_uri, _run_info(context, application.name))
    log.info("Application %s: data %s -> %s", application.name, application.data_uri, artifact_uri)
    return {
        "name": application.name,
        "artifact_uri": artifact_uri,
        "config": config,
        "entrypoint": workload_entrypoint(python, ZONE_MODULE, config),
        "prepare": prepare,
        "cluster_spec": application.cluster_spec or cluster_spec,  # the application's own, else the DAG's
        "runtime_env": application.runtime_env or runtime_env or {},
    }


class _SkipWithoutEntrypoint:
    """Run the retry job, or skip when the plan says there is nothing to retry (no entrypoint).

    Skipping here instead of in a short-circuit task: a short-circuit inside a *mapped* task group does
    not skip its mapped downstream tasks in Airflow 3.3 (``SkipMixin`` only raises for unmapped tasks).
    """

    entrypoint: Any

    def execute(self, context: Any) -> Any:
        if not self.entrypoint:
            raise AirflowSkipException("no failed zones: nothing to retry")
        return super().execute(context)  # type: ignore[misc]  # the operator it is mixed into


class RetryFailedZonesOperator(_SkipWithoutEntrypoint, SubmitRayJobOperator):
    """The retry job on the run's cluster (``ephemeral`` and ``standing`` modes)."""


class RetryFailedZonesRayJobOperator(_SkipWithoutEntrypoint, KubeRayJobOperator):
    """The retry job as a RayJob (``rayjob`` mode)."""


class RetryFailedZonesOneTaskOperator(_SkipWithoutEntrypoint, EphemeralRayJobOperator):
    """The retry job on a cluster of its own, or the pool's, in one task (``one_task`` and ``pool`` modes)."""


RETRY_OPERATORS: dict[str, type[BaseOperator]] = {
    "ephemeral": RetryFailedZonesOperator, "standing": RetryFailedZonesOperator,
    "rayjob": RetryFailedZonesRayJobOperator, "one_task": RetryFailedZonesOneTaskOperator,
    "pool": RetryFailedZonesOneTaskOperator,
}  # fmt: skip


@task(task_id="retry_plan", multiple_outputs=True)
def retry_plan(
    summary: XComArg | dict[str, Any], config: XComArg | dict[str, Any], python: str
) -> dict[str, Any]:
    """When zones failed, the entrypoint retraining only those; ``None`` entries (retry skipped) otherwise."""
    summary, config = resolved(summary), resolved(config)
    if not summary.get("failed"):
        log.info("No failed zones in %s: nothing to retry", summary.get("application"))
        return {"entrypoint": None, "artifact_uri": None}
    retry_uri = _join(summary["artifact_uri"], RETRY_FOLDER)
    retry_config = {**config, "output_uri": retry_uri, "max_failed_fraction": 1.0}
    log.info(
        "Retrying %s failed zones of %s: %s",
        summary["failed"],
        summary["application"],
        summary["failed_zones"],
    )
    entrypoint = workload_entrypoint(python, ZONE_MODULE, retry_config, "--only-failed", summary["manifest"])
    return {"entrypoint": entrypoint, "artifact_uri": retry_uri}


@task(task_id="result", trigger_rule="none_failed")
def result(
    first: XComArg | dict[str, Any], retried: XComArg | dict[str, Any] | None, max_failed_fraction: float
) -> dict[str, Any]:
    """The application's final summary (after the retry, when there was one); fails above the tolerance."""
    first = resolved(first)
    retried = None if retried is None else resolved(retried)
    final = retried or first
    total = final.get("zones_total") or 0
    fraction = (final.get("failed") or 0) / total if total else 0.0
    final = {**final, "retried": retried is not None, "failed_before_retry": first.get("failed")}
    if fraction > max_failed_fraction:
        raise AirflowException(
            f"application {final.get('application')}: {final.get('failed')} of {total} zones still failed "
            f"after the retry ({fraction:.1%} > {max_failed_fraction:.1%}); failed zones "
            f"{final.get('failed_zones')}; see the manifest {final.get('manifest')}"
        )
    log.info(
        "Application %s: %s/%s zones trained (%s failed before the retry)",
        final.get("application"),
        final.get("succeeded"),
        total,
        first.get("failed"),
    )
    return final


@dataclass(frozen=True)
class ZoneWiring:
    """Builds the tasks inside a DAG context (see :func:`build_zone_training_dag` for the options)."""

    settings: ClusterSettings
    output_uri: str
    shared_cluster: bool
    retry_failed_zones: bool
    max_failed_after_retry: float
    runtime_env: dict[str, Any] | None
    job_timeout: float | None
    deferrable: bool
    poll_interval: float = 2.0

    def wire(self, apps: list[dict[str, Any]]) -> None:
        """Create the mapped per-application group (and the shared cluster, when asked)."""
        shared = None
        if not self.settings.ephemeral or self.shared_cluster:
            shared = setup_task(self.settings)  # the shared cluster, the attached one, or none (per job)
        group = self._group(shared, prepare=any(a.get("prepare_entrypoint") for a in apps))
        mapped = group.expand(app=apps)
        if shared is not None:
            shared >> mapped
            teardown = teardown_task(shared, self.settings)
            if teardown is not None:
                mapped >> teardown

    def _group(self, shared: BaseOperator | None, *, prepare: bool) -> Any:
        python = self.settings.interpreter

        @task_group(group_id="application")
        def application(app: dict[str, Any]) -> None:
            planned = plan(app, self.output_uri, python, self.runtime_env, self.settings.spec)
            create = None
            if self.settings.ephemeral and shared is None:
                create = create_cluster_task(self.settings, spec=upstream(planned, "cluster_spec"))
                planned >> create
            job: dict[str, Any] = {
                "deferrable": self.deferrable, "poll_interval": self.poll_interval,
                "job_timeout": self.job_timeout, "spec": upstream(planned, "cluster_spec"),
                "runtime_env": upstream(planned, "runtime_env"),  # the application's own, else the DAG's
            }  # fmt: skip
            cluster = create or shared
            train = ray_job_task(
                self.settings, cluster, task_id="train", entrypoint=upstream(planned, "entrypoint"), **job
            )
            collect = CollectZoneTrainingOperator(
                task_id="collect_manifest",
                artifact_uri=upstream(planned, "artifact_uri"),
                application=upstream(planned, "name"),
            )
            planned >> train >> collect
            if prepare:
                prep = ray_job_task(
                    self.settings, cluster, task_id="prepare", entrypoint=upstream(planned, "prepare"), **job
                )
                planned >> prep >> train
                if create is not None:
                    create >> prep
            retried = self._retry(planned, collect, cluster, job) if self.retry_failed_zones else None
            final = result(collect.output, retried, self.max_failed_after_retry)
            if create is not None:
                final >> delete_cluster_task(create, self.settings)

        return application

    def _retry(
        self, planned: XComArg, collect: BaseOperator, cluster: BaseOperator | None, job: dict[str, Any]
    ) -> XComArg:
        """Retrain the failed zones once (skipped when none failed); returns the retry's summary."""
        again = retry_plan(collect.output, upstream(planned, "config"), self.settings.interpreter)
        retry = ray_job_task(
            self.settings, cluster, task_id="retry_failed", entrypoint=upstream(again, "entrypoint"),
            operator_class=RETRY_OPERATORS[self.settings.resolved_mode], **job,
        )  # fmt: skip
        collect_retry = CollectZoneTrainingOperator(
            task_id="collect_retry",
            artifact_uri=upstream(again, "artifact_uri"),
            application=upstream(planned, "name"),
        )
        again >> retry >> collect_retry
        return collect_retry.output
