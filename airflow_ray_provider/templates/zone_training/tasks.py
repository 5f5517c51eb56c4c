"""Task wiring of the per-zone training template (see :mod:`.factory`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from airflow.sdk import task, task_group
from airflow.sdk.exceptions import AirflowException, AirflowSkipException

from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
from airflow_ray_provider.templates.common import (
    ClusterSettings,
    create_cluster_task,
    delete_cluster_task,
    workload_entrypoint,
)

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
    app: dict[str, Any], output_uri: str, python: str, runtime_env: dict[str, Any] | None, **context: Any
) -> dict[str, Any]:
    """Resolve one application: its artifact folder, job config and entrypoint (Jinja rendered here)."""
    from airflow_ray_provider.templates.zone_training.application import ZoneApplication

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
        "cluster_spec": application.cluster_spec,
        "runtime_env": application.runtime_env or runtime_env or {},
    }


class RetryFailedZonesOperator(SubmitRayJobOperator):
    """Submit the retry job, or skip when the plan says there is nothing to retry (no entrypoint).

    Skipping here instead of in a short-circuit task: a short-circuit inside a *mapped* task group does
    not skip its mapped downstream tasks in Airflow 3.3 (``SkipMixin`` only raises for unmapped tasks).
    """

    def execute(self, context: Any) -> Any:
        if not self.entrypoint:
            raise AirflowSkipException("no failed zones: nothing to retry")
        return super().execute(context)


@task(task_id="retry_plan", multiple_outputs=True)
def retry_plan(summary: dict[str, Any], config: dict[str, Any], python: str) -> dict[str, Any]:
    """When zones failed, the entrypoint retraining only those; ``None`` entries (retry skipped) otherwise."""
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
    first: dict[str, Any], retried: dict[str, Any] | None, max_failed_fraction: float
) -> dict[str, Any]:
    """The application's final summary (after the retry, when there was one); fails above the tolerance."""
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
        if self.settings.ephemeral and self.shared_cluster:
            shared = create_cluster_task(self.settings)
        group = self._group(shared, prepare=any(a.get("prepare_entrypoint") for a in apps))
        mapped = group.expand(app=apps)
        if shared is not None:
            shared >> mapped >> delete_cluster_task(shared, self.settings)

    def _job_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "deferrable": self.deferrable, "wait_for_completion": True, "poll_interval": self.poll_interval,
        }  # fmt: skip
        if self.job_timeout:
            kwargs["job_timeout"] = self.job_timeout
        return kwargs

    def _group(self, shared: Any, *, prepare: bool) -> Any:
        from airflow_ray_provider.operators.metrics import CollectZoneTrainingOperator

        python = self.settings.interpreter

        @task_group(group_id="application")
        def application(app: dict[str, Any]) -> None:
            planned = plan(app, self.output_uri, python, self.runtime_env)
            create = None
            if self.settings.ephemeral and shared is None:
                create = create_cluster_task(self.settings, spec=planned["cluster_spec"])
                planned >> create
            target = self._target(create or shared)
            train = SubmitRayJobOperator(
                task_id="train", entrypoint=planned["entrypoint"], runtime_env=planned["runtime_env"],
                **target, **self._job_kwargs(),
            )  # fmt: skip
            collect = CollectZoneTrainingOperator(
                task_id="collect_manifest", artifact_uri=planned["artifact_uri"], application=planned["name"]
            )
            planned >> train >> collect
            if prepare:
                prep = SubmitRayJobOperator(
                    task_id="prepare", entrypoint=planned["prepare"], runtime_env=planned["runtime_env"],
                    **target, **self._job_kwargs(),
                )  # fmt: skip
                planned >> prep >> train
                if create is not None:
                    create >> prep
            retried = None
            if self.retry_failed_zones:
                again = retry_plan(collect.output, planned["config"], python)
                retry = RetryFailedZonesOperator(
                    task_id="retry_failed", entrypoint=again["entrypoint"],
                    runtime_env=planned["runtime_env"], **target, **self._job_kwargs(),
                )  # fmt: skip
                collect_retry = CollectZoneTrainingOperator(
                    task_id="collect_retry", artifact_uri=again["artifact_uri"], application=planned["name"]
                )
                again >> retry >> collect_retry
                retried = collect_retry.output
            final = result(collect.output, retried, self.max_failed_after_retry)
            if create is not None:
                final >> delete_cluster_task(create, self.settings)

        return application

    def _target(self, create: Any) -> dict[str, Any]:
        if create is not None:
            return {"cluster": create.output}
        return {"ray_conn_id": self.settings.ray_conn_id}
