"""KubeRay RayJobs over the official ``kubernetes`` client: typed status, its one verdict, and CRUD.

KubeRay's state machine (``rayjob_controller.go``) moves ``status.jobDeploymentStatus`` through
``""`` (new) -> ``Initializing`` (cluster being created) -> ``Running`` (job submitted) -> ``Complete`` or
``Failed``; ``Suspending`` -> ``Suspended`` while ``spec.suspend`` is set, and ``Retrying`` -> new again
while ``backoffLimit`` allows. ``status.jobStatus`` mirrors Ray's own job status once the job exists.
Only ``Complete`` and ``Failed`` are final (KubeRay turns a retryable ``Failed`` into ``Retrying`` in the
same reconcile, so a reader never sees it); a RayJob succeeded only when it is ``Complete`` *and* its Ray
job ``SUCCEEDED``. No Airflow imports.
"""

from __future__ import annotations

import base64
import contextlib
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.kuberay.errors import (
    KubeRayConflictError,
    KubeRayNotFoundError,
    KubeRayTimeoutError,
)
from airflow_ray_provider.kuberay.labels import matches, selector

if TYPE_CHECKING:
    from airflow_ray_provider.kuberay.client import KubeRayClient

GROUP, VERSION, PLURAL = "ray.io", "v1", "rayjobs"

DEPLOYMENT_NEW = ""
DEPLOYMENT_INITIALIZING = "Initializing"
DEPLOYMENT_RUNNING = "Running"
DEPLOYMENT_COMPLETE = "Complete"
DEPLOYMENT_FAILED = "Failed"
DEPLOYMENT_SUSPENDING = "Suspending"
DEPLOYMENT_SUSPENDED = "Suspended"
DEPLOYMENT_RETRYING = "Retrying"
#: ``jobDeploymentStatus`` values after which KubeRay never changes the RayJob again.
FINAL_DEPLOYMENT_STATUSES = frozenset({DEPLOYMENT_COMPLETE, DEPLOYMENT_FAILED})

REASON_DEADLINE_EXCEEDED = "DeadlineExceeded"
REASON_APP_FAILED = "AppFailed"
REASON_SUBMISSION_FAILED = "SubmissionFailed"
#: KubeRay's label on the RayCluster a RayJob created (``ray.io/originated-from-crd: RayJob``).
LABEL_ORIGINATED_FROM_CRD = "ray.io/originated-from-crd"


@dataclass(frozen=True)
class RayJobStatus:
    """A RayJob's status, typed.

    :param name: ``metadata.name``.
    :param namespace: ``metadata.namespace``.
    :param deployment_status: ``status.jobDeploymentStatus`` (``""`` before KubeRay looked at it).
    :param job_status: ``status.jobStatus``: Ray's job status (``""`` before the job exists).
    :param reason: ``status.reason`` (``AppFailed``, ``DeadlineExceeded``, ``SubmissionFailed``, ...).
    :param message: ``status.message``.
    :param job_id: ``status.jobId``: the Ray submission id.
    :param cluster_name: ``status.rayClusterName``.
    :param start_time: ``status.startTime``.
    :param end_time: ``status.endTime``.
    :param failed: ``status.failed``: failed attempts so far.
    :param suspend: ``spec.suspend``.
    :param deleting: the object has a ``deletionTimestamp``.
    """

    name: str
    namespace: str
    deployment_status: str = ""
    job_status: str = ""
    reason: str = ""
    message: str = ""
    job_id: str = ""
    cluster_name: str = ""
    start_time: str = ""
    end_time: str = ""
    failed: int = 0
    suspend: bool = False
    deleting: bool = False

    @classmethod
    def from_object(cls, obj: dict[str, Any]) -> RayJobStatus:
        """Read the status of a RayJob object as returned by the API."""
        meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
        return cls(
            name=meta.get("name", ""),
            namespace=meta.get("namespace", ""),
            deployment_status=status.get("jobDeploymentStatus") or "",
            job_status=status.get("jobStatus") or "",
            reason=status.get("reason") or "",
            message=status.get("message") or "",
            job_id=status.get("jobId") or spec.get("jobId") or "",
            cluster_name=status.get("rayClusterName") or "",
            start_time=status.get("startTime") or "",
            end_time=status.get("endTime") or "",
            failed=int(status.get("failed") or 0),
            suspend=bool(spec.get("suspend")),
            deleting=bool(meta.get("deletionTimestamp")),
        )

    @property
    def is_final(self) -> bool:
        """KubeRay will not change this RayJob again: ``Complete`` or ``Failed``."""
        return self.deployment_status in FINAL_DEPLOYMENT_STATUSES

    @property
    def is_success(self) -> bool:
        """``Complete`` with a Ray job that ``SUCCEEDED`` (``Complete`` + ``STOPPED`` is not a success)."""
        return self.deployment_status == DEPLOYMENT_COMPLETE and self.job_status == "SUCCEEDED"

    @property
    def is_suspended(self) -> bool:
        """Suspended, or on its way there (its cluster is being deleted)."""
        return self.deployment_status in (DEPLOYMENT_SUSPENDING, DEPLOYMENT_SUSPENDED)

    def summary(self) -> str:
        """One line for logs and errors: deployment status, job status, reason and message."""
        parts = [
            f"jobDeploymentStatus={self.deployment_status or '<new>'}",
            f"jobStatus={self.job_status or '<none>'}",
        ]
        if self.reason:
            parts.append(f"reason={self.reason}")
        if self.message:
            parts.append(f"message={self.message}")
        if self.failed:
            parts.append(f"failed attempts={self.failed}")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (trigger events)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RayJobStatus:
        """Rebuild a status from :meth:`to_dict` output."""
        return cls(**{key: data[key] for key in cls.__dataclass_fields__ if key in data})


class RayJobClient:
    """RayJob create / get / patch / delete / list / wait until gone, through a :class:`KubeRayClient`.

    It reuses that client's API client, namespace, timeouts and transient-error retries (and so the same
    namespaced Role, see :mod:`airflow_ray_provider.kuberay.rbac`).

    :param client: the typed RayCluster client to share.
    """

    def __init__(self, client: KubeRayClient) -> None:
        self.kube = client

    def _ns(self, namespace: str | None) -> str:
        return namespace or self.kube.namespace

    def _custom(self) -> Any:
        return self.kube._custom()

    def create(self, body: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Create a RayJob; raises :class:`KubeRayConflictError` when the name is taken."""
        ns = self._ns(namespace or body.get("metadata", {}).get("namespace"))
        name = body.get("metadata", {}).get("name")
        return self.kube._call(
            f"create RayJob {ns}/{name}",
            self._custom().create_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, body,
        )  # fmt: skip

    def get(self, name: str, *, namespace: str | None = None) -> dict[str, Any]:
        """Read a RayJob; raises :class:`KubeRayNotFoundError` when absent."""
        ns = self._ns(namespace)
        return self.kube._call(
            f"get RayJob {ns}/{name}",
            self._custom().get_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name,
        )  # fmt: skip

    def find(self, name: str, *, namespace: str | None = None) -> dict[str, Any] | None:
        """Read a RayJob, or ``None`` when it does not exist."""
        try:
            return self.get(name, namespace=namespace)
        except KubeRayNotFoundError:
            return None

    def patch(self, name: str, patch: dict[str, Any], *, namespace: str | None = None) -> dict[str, Any]:
        """Merge-patch a RayJob (``spec.suspend``, annotations)."""
        ns = self._ns(namespace)
        return self.kube._call(
            f"patch RayJob {ns}/{name}",
            self._custom().patch_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name, patch,
        )  # fmt: skip

    def delete(self, name: str, *, namespace: str | None = None) -> bool:
        """Delete a RayJob (Kubernetes then deletes the cluster and submitter it owns); ``False`` if gone."""
        ns = self._ns(namespace)
        try:
            self.kube._call(
                f"delete RayJob {ns}/{name}",
                self._custom().delete_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, name,
                propagation_policy="Background",
            )  # fmt: skip
        except KubeRayNotFoundError:
            return False
        return True

    def list_labelled(
        self, labels: dict[str, str] | None = None, *, namespace: str | None = None
    ) -> list[dict[str, Any]]:
        """RayJobs whose labels include ``labels`` (filtered again here, as the RayCluster client does)."""
        ns = self._ns(namespace)
        kwargs = {"label_selector": selector(labels)} if labels else {}
        result = self.kube._call(
            f"list RayJobs in {ns}",
            self._custom().list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL, **kwargs,
        )  # fmt: skip
        return [item for item in result.get("items", []) if matches(item, labels or {})]

    def wait_until_gone(
        self, name: str, *, namespace: str | None = None, timeout: float = 120.0, poll_interval: float = 0.5
    ) -> None:
        """Poll until the RayJob no longer exists; raises :class:`KubeRayTimeoutError` otherwise."""
        deadline = time.monotonic() + timeout
        ns = self._ns(namespace)
        while self.find(name, namespace=ns) is not None:
            if time.monotonic() >= deadline:
                raise KubeRayTimeoutError(
                    f"RayJob {ns}/{name} still exists {timeout:.0f}s after delete; check its finalizers: "
                    f"kubectl describe rayjob {name} -n {ns}"
                )
            time.sleep(poll_interval)

    def create_owned_secret(
        self, name: str, *, data: dict[str, str], owner: dict[str, Any], namespace: str | None = None
    ) -> None:
        """Create an Opaque Secret owned by a RayJob: Kubernetes deletes it with the RayJob.

        :param owner: the RayJob object as the API returned it (its ``uid`` is needed).
        """
        ns = self._ns(namespace)
        meta = owner.get("metadata") or {}
        reference = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RayJob", "name": meta.get("name"),
                     "uid": meta.get("uid"), "blockOwnerDeletion": False}  # fmt: skip
        body = {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": ns, "labels": dict(meta.get("labels") or {}),
                         "ownerReferences": [reference]},
            "data": {key: base64.b64encode(value.encode()).decode() for key, value in data.items()},
        }  # fmt: skip
        # An earlier try created it: keep it (the RayJob's cluster already uses it).
        with contextlib.suppress(KubeRayConflictError):
            self.kube._call(
                f"create Secret {ns}/{name}", self.kube._core().create_namespaced_secret, ns, body
            )
