"""KubeRay RayJobs, planned: cluster and job as one Kubernetes resource, so Kubernetes enforces cleanup
and deadlines.

:class:`KubeRayJobs` validates everything and builds the RayJob's body (:meth:`~KubeRayJobs.plan`, no API
call) through one ``kuberay`` connection's :class:`KubeRayBackend` (its client and settings).
:class:`~airflow_ray_provider.launch.RayJobTarget` runs the plan: create or re-attach, watch, suspend or
delete. The handle to a RayJob's cluster is never owned: the RayJob owns it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.clusters.backend import TaskIdentity
from airflow_ray_provider.clusters.handle import RayClusterHandle
from airflow_ray_provider.clusters.kuberay import KubeRayBackend
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.kuberay import (
    ANNOTATION_RUN_ID,
    ClusterStatus,
    KubeRaySpecError,
    RayClusterSpec,
    RayJobClient,
    RayJobOptions,
    RayJobStatus,
    build_rayjob_body,
    check_rayjob_name,
    dashboard_url,
    generate_name,
    token_ref_of,
    validate_options,
)

log = logging.getLogger(__name__)

#: Set when a killed task suspends a RayJob: the next try resumes the RayJob instead of waiting.
ANNOTATION_SUSPENDED_ON_KILL = "airflow-ray-provider/suspended-on-kill"


@dataclass(frozen=True)
class RayJobRequest:
    """What the RayJob operator was asked for (templates rendered).

    :param options: the job and the rules Kubernetes enforces.
    :param spec: the cluster KubeRay creates for the job (the same spec as ``CreateRayClusterOperator``).
    :param manifest: instead, a RayCluster manifest whose ``spec`` becomes ``rayClusterSpec``.
    :param cluster_name: instead, a standing RayCluster (``clusterSelector``); it must be ready.
    :param rayjob_name: a fixed RayJob name (default: generated from the task identity).
    :param name_prefix: prefix of generated names.
    :param namespace: overrides the connection's namespace.
    :param dashboard_url_template: overrides how the cluster's dashboard is reached.
    """

    options: RayJobOptions
    spec: RayClusterSpec | None = None
    manifest: dict[str, Any] | str | None = None
    cluster_name: str | None = None
    rayjob_name: str | None = None
    name_prefix: str = "rayjob"
    namespace: str | None = None
    dashboard_url_template: str | None = None


@dataclass(frozen=True)
class RayJobPlan:
    """A validated RayJob, fixed before any API call.

    :param name: the RayJob's name (the same for every try of the task instance).
    :param namespace: its namespace.
    :param labels: its ownership labels.
    :param body: the RayJob object sent to the API.
    :param standing_cluster: the standing cluster it targets (``None``: KubeRay creates one).
    :param token_secret: the token Secret the provider creates for it (``secret`` auth mode only).
    :param dashboard_url_template: how its cluster's dashboard is reached.
    """

    name: str
    namespace: str
    labels: dict[str, str] = field(default_factory=dict)
    body: dict[str, Any] = field(default_factory=dict)
    standing_cluster: str | None = None
    token_secret: str | None = None
    dashboard_url_template: str | None = None

    @property
    def where(self) -> str:
        """``RayJob <namespace>/<name>``."""
        return f"RayJob {self.namespace}/{self.name}"


@dataclass(frozen=True)
class RayJobLook:
    """One look at a RayJob.

    :param status: its typed status.
    :param cluster: a handle (never owned) to its cluster once the head is ready: its dashboard and token.
    :param cluster_gone: the RayJob names a cluster that no longer exists (KubeRay deleted it).
    """

    status: RayJobStatus
    cluster: RayClusterHandle | None = None
    cluster_gone: bool = False


def check_options(options: RayJobOptions, *, standing: bool) -> None:
    """Check a RayJob's options the way KubeRay would (e.g. when the DAG is parsed).

    :param standing: the RayJob targets a standing cluster.
    :raises RayInvalidInputError: naming the bad field and the fix.
    """
    try:
        validate_options(options, selector=standing)
    except KubeRaySpecError as exc:
        raise RayInvalidInputError(str(exc)) from exc


class KubeRayJobs:
    """Plan RayJobs through one ``kuberay`` connection (the RayJob target runs them).

    :param backend: the connection's KubeRay backend (its client and settings are shared).
    """

    def __init__(self, backend: KubeRayBackend) -> None:
        self.backend = backend
        self.settings = backend.settings

    @property
    def rayjobs(self) -> RayJobClient:
        """The RayJob client, on the backend's Kubernetes client."""
        return RayJobClient(self.backend.client)

    def plan(self, request: RayJobRequest, identity: TaskIdentity) -> RayJobPlan:
        """Validate everything and build the body.

        :raises RayInvalidInputError: naming the bad field.
        """
        namespace = request.namespace or self.settings.namespace
        template = request.dashboard_url_template or self.settings.dashboard_url_template
        try:
            name = request.rayjob_name or generate_name(
                prefix=request.name_prefix, dag_id=identity.dag_id, run_id=identity.run_id,
                task_id=identity.task_id, map_index=identity.map_index,
            )  # fmt: skip
            check_rayjob_name(name)
            dashboard_url(ClusterStatus(name=name, namespace=namespace), template)  # a bad field fails now
            cluster_spec, labels, annotations = self._cluster_part(request, name, namespace)
            owner = identity.labels()
            body = build_rayjob_body(
                request.options, name=name, namespace=namespace, cluster_spec=cluster_spec,
                cluster_name=request.cluster_name, labels={**labels, **owner},
                annotations={**annotations, ANNOTATION_RUN_ID: identity.run_id},
            )  # fmt: skip
        except (KubeRaySpecError, ValueError) as exc:
            raise RayInvalidInputError(str(exc)) from exc
        ref = token_ref_of({"metadata": {"name": name}, "spec": cluster_spec or {}})
        return RayJobPlan(
            name=name, namespace=namespace, labels=owner, body=body, standing_cluster=request.cluster_name,
            token_secret=ref.secret_name if ref is not None and ref.provider_created else None,
            dashboard_url_template=template,
        )  # fmt: skip

    def _cluster_part(
        self, request: RayJobRequest, name: str, namespace: str
    ) -> tuple[dict[str, Any] | None, dict[str, str], dict[str, str]]:
        """The ``rayClusterSpec`` and the labels/annotations KubeRay copies onto the cluster."""
        if sum(x is not None for x in (request.spec, request.manifest, request.cluster_name)) > 1:
            raise KubeRaySpecError(
                "pass one cluster for the RayJob: spec or manifest (KubeRay creates it), or cluster (a "
                "standing RayCluster, clusterSelector), not several"
            )
        if request.cluster_name is not None:
            return None, {}, {}
        body = self.backend.body(request.spec, request.manifest, name=name, namespace=namespace)
        if request.manifest is not None:
            meta = body["metadata"]
            return body["spec"], dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
        spec = request.spec or RayClusterSpec()
        return body["spec"], dict(spec.labels), dict(spec.annotations)

    def close(self) -> None:
        """Close the Kubernetes API client, if one was built."""
        self.backend.close()
