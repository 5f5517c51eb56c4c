"""Turn a :class:`RayClusterSpec` into the RayCluster body sent to Kubernetes, and find a body's token Secret.

User manifests go through :mod:`airflow_ray_provider.kuberay.manifest` instead.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from airflow_ray_provider.kuberay import controller_rules as rules
from airflow_ray_provider.kuberay import images, pod
from airflow_ray_provider.kuberay import validation as v
from airflow_ray_provider.kuberay.spec import (
    API_VERSION,
    AUTH_TOKEN_KEY,
    HEAD_PORTS,
    KIND,
    LABEL_KUEUE_QUEUE,
    HeadGroup,
    RayClusterSpec,
    WorkerGroup,
    validate_spec,
)


@dataclass(frozen=True)
class TokenRef:
    """Where the cluster's Ray auth token lives: a Secret, and whether the provider created that Secret."""

    secret_name: str
    key: str = AUTH_TOKEN_KEY
    provider_created: bool = False


def token_secret_name(cluster_name: str) -> str:
    """The Secret the provider creates in ``secret`` auth mode."""
    return f"{cluster_name}-ray-token"


def build_body(
    spec: RayClusterSpec,
    *,
    name: str,
    namespace: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    default_image: str | None = None,
) -> dict[str, Any]:
    """Build a RayCluster body from a spec; validates first (no API call is made here).

    :param labels: ownership labels, merged over ``spec.labels``.
    :param annotations: ownership annotations, merged over ``spec.annotations``.
    :param default_image: image to use when the spec has none (from the connection); see
        :func:`airflow_ray_provider.kuberay.images.resolve` for GPU groups and version checks.
    """
    validate_spec(spec)
    rules.check_cluster_name(name)
    v.check_dns_label(namespace, "namespace")
    resolved = images.resolve(spec, default_image)
    token = TokenRef(token_secret_name(name), provider_created=True) if spec.auth == "secret" else None
    body_spec: dict[str, Any] = {
        "rayVersion": resolved.ray_version,
        "headGroupSpec": _head(spec.head, spec, resolved.head, token),
        "workerGroupSpecs": [
            _worker(g, spec, image, token)
            for g, image in zip(spec.worker_groups, resolved.workers, strict=True)
        ],
    }
    if spec.auth in (None, "auth_options"):
        body_spec["authOptions"] = {"mode": "token"}
    if spec.queue_name is not None:
        body_spec["suspend"] = True  # Kueue unsuspends it once the workload is admitted
    if spec.enable_autoscaling:
        body_spec["enableInTreeAutoscaling"] = True
        if spec.autoscaler_idle_timeout_seconds is not None:
            body_spec["autoscalerOptions"] = {"idleTimeoutSeconds": spec.autoscaler_idle_timeout_seconds}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**spec.labels, **_queue_label(spec), **(labels or {})},
        "annotations": {**spec.annotations, **(annotations or {})},
    }
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body_spec}
    rules.check_raycluster(body)
    return body


def _queue_label(spec: RayClusterSpec) -> dict[str, str]:
    return {LABEL_KUEUE_QUEUE: spec.queue_name} if spec.queue_name is not None else {}


def _container(name: str, image: str, group: HeadGroup | WorkerGroup, gpu: int, spec: RayClusterSpec,
               token: TokenRef | None) -> dict[str, Any]:  # fmt: skip
    limits: dict[str, str] = {"cpu": str(group.cpu), "memory": str(group.memory), **group.resources}
    if gpu:
        limits["nvidia.com/gpu"] = str(gpu)
    env: list[dict[str, Any]] = [{"name": key, "value": value} for key, value in sorted(spec.env.items())]
    if token is not None:
        # Without authOptions, Ray reads its token from these two variables on every node.
        env.append({"name": "RAY_AUTH_MODE", "value": "token"})
        ref = {"name": token.secret_name, "key": token.key}
        env.append({"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": ref}})
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "resources": {"requests": dict(limits), "limits": limits},
    }
    if env:
        container["env"] = env
    return container


def _template(
    container: dict[str, Any], group: HeadGroup | WorkerGroup, spec: RayClusterSpec
) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"containers": [container]}
    if group.node_selector:
        pod_spec["nodeSelector"] = dict(group.node_selector)
    if group.tolerations:
        pod_spec["tolerations"] = copy.deepcopy(group.tolerations)
    if group.affinity:
        pod_spec["affinity"] = copy.deepcopy(group.affinity)
    if spec.service_account:
        pod_spec["serviceAccountName"] = spec.service_account
    return pod.apply(spec.pods, {"spec": pod_spec})


def _head(head: HeadGroup, spec: RayClusterSpec, image: str, token: TokenRef | None) -> dict[str, Any]:
    container = _container("ray-head", image, head, 0, spec, token)
    container["ports"] = copy.deepcopy(HEAD_PORTS)
    params = dict(head.ray_start_params)
    if spec.enable_autoscaling:
        params.setdefault("num-cpus", "0")  # with an autoscaler, work goes to workers, not the head
    group: dict[str, Any] = {"rayStartParams": params, "template": _template(container, head, spec)}
    if head.service_type:
        group["serviceType"] = head.service_type
    return group


def _worker(group: WorkerGroup, spec: RayClusterSpec, image: str, token: TokenRef | None) -> dict[str, Any]:
    container = _container("ray-worker", image, group, group.gpu, spec, token)
    return {
        "groupName": group.name,
        "replicas": group.replicas,
        "minReplicas": group.effective_min,
        "maxReplicas": group.effective_max,
        "rayStartParams": dict(group.ray_start_params),
        "template": _template(container, group, spec),
    }


def token_ref_of(body: dict[str, Any]) -> TokenRef | None:
    """Where a RayCluster body keeps its auth token: ``authOptions`` or a ``RAY_AUTH_TOKEN`` secretKeyRef."""
    spec = body.get("spec") or {}
    auth = spec.get("authOptions") or {}
    name = (body.get("metadata") or {}).get("name", "")
    if auth.get("mode") == "token":
        # KubeRay names its generated Secret after the cluster (utils.CheckName: the last 50 characters)
        # unless secretName is set.
        return TokenRef(auth.get("secretName") or rules.kuberay_secret_name(name))
    containers = (
        ((spec.get("headGroupSpec") or {}).get("template") or {}).get("spec", {}).get("containers", [])
    )
    for container in containers:
        for env in container.get("env") or []:
            ref = (
                ((env.get("valueFrom") or {}).get("secretKeyRef"))
                if env.get("name") == "RAY_AUTH_TOKEN"
                else None
            )
            if ref and ref.get("name"):
                provider = ref["name"] == token_secret_name(name)
                return TokenRef(ref["name"], ref.get("key", AUTH_TOKEN_KEY), provider_created=provider)
    return None
