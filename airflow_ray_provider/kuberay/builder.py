"""Turn a :class:`RayClusterSpec` (or a user manifest) into the RayCluster body sent to Kubernetes."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_ray_provider.kuberay import controller_rules as rules
from airflow_ray_provider.kuberay import validation as v
from airflow_ray_provider.kuberay.errors import KubeRaySpecError
from airflow_ray_provider.kuberay.spec import (
    API_VERSION,
    AUTH_TOKEN_KEY,
    HEAD_PORTS,
    KIND,
    HeadGroup,
    RayClusterSpec,
    WorkerGroup,
    default_ray_version,
    validate_spec,
)

# RayClusterSpec fields of KubeRay 1.7 (ray.io_rayclusters.yaml); a manifest with another key is rejected
# here because a real API server silently prunes unknown fields unless asked for strict validation.
KNOWN_SPEC_FIELDS = frozenset(
    {
        "authOptions", "autoscalerOptions", "enableInTreeAutoscaling", "gcsFaultToleranceOptions",
        "headGroupSpec", "headServiceAnnotations", "historyServerOptions", "managedBy", "networkPolicy",
        "rayVersion", "suspend", "tlsOptions", "upgradeStrategy", "workerGroupSpecs",
    }
)  # fmt: skip


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
    :param default_image: image to use when the spec has none (from the connection).
    """
    validate_spec(spec)
    rules.check_cluster_name(name)
    v.check_dns_label(namespace, "namespace")
    ray_version = spec.ray_version or default_ray_version()
    image = spec.image or default_image or f"rayproject/ray:{ray_version}"
    token = TokenRef(token_secret_name(name), provider_created=True) if spec.auth == "secret" else None
    body_spec: dict[str, Any] = {
        "rayVersion": ray_version,
        "headGroupSpec": _head(spec.head, spec, image, token),
        "workerGroupSpecs": [_worker(g, spec, image, token) for g in spec.worker_groups],
    }
    if spec.auth in (None, "auth_options"):
        body_spec["authOptions"] = {"mode": "token"}
    if spec.enable_autoscaling:
        body_spec["enableInTreeAutoscaling"] = True
        if spec.autoscaler_idle_timeout_seconds is not None:
            body_spec["autoscalerOptions"] = {"idleTimeoutSeconds": spec.autoscaler_idle_timeout_seconds}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**spec.labels, **(labels or {})},
        "annotations": {**spec.annotations, **(annotations or {})},
    }
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body_spec}
    rules.check_raycluster(body)
    return body


def _container(name: str, image: str, cpu: str, memory: str, gpu: int, spec: RayClusterSpec,
               token: TokenRef | None) -> dict[str, Any]:  # fmt: skip
    limits: dict[str, str] = {"cpu": str(cpu), "memory": str(memory)}
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


def _pod_spec(container: dict[str, Any], node_selector: dict[str, str], tolerations: list[dict[str, Any]],
              spec: RayClusterSpec) -> dict[str, Any]:  # fmt: skip
    pod: dict[str, Any] = {"containers": [container]}
    if node_selector:
        pod["nodeSelector"] = dict(node_selector)
    if tolerations:
        pod["tolerations"] = copy.deepcopy(tolerations)
    if spec.service_account:
        pod["serviceAccountName"] = spec.service_account
    return pod


def _head(head: HeadGroup, spec: RayClusterSpec, image: str, token: TokenRef | None) -> dict[str, Any]:
    container = _container("ray-head", image, head.cpu, head.memory, 0, spec, token)
    container["ports"] = copy.deepcopy(HEAD_PORTS)
    return {
        "rayStartParams": dict(head.ray_start_params),
        "template": {"spec": _pod_spec(container, head.node_selector, head.tolerations, spec)},
    }


def _worker(group: WorkerGroup, spec: RayClusterSpec, image: str, token: TokenRef | None) -> dict[str, Any]:
    container = _container(
        "ray-worker", group.image or image, group.cpu, group.memory, group.gpu, spec, token
    )
    return {
        "groupName": group.name,
        "replicas": group.replicas,
        "minReplicas": group.effective_min,
        "maxReplicas": group.effective_max,
        "rayStartParams": dict(group.ray_start_params),
        "template": {"spec": _pod_spec(container, group.node_selector, group.tolerations, spec)},
    }


def load_manifest(manifest: dict[str, Any] | str) -> dict[str, Any]:
    """Return a deep copy of a manifest given as a dict, a YAML/JSON text or a YAML file path."""
    if isinstance(manifest, dict):
        return copy.deepcopy(manifest)
    if not isinstance(manifest, str):
        raise KubeRaySpecError(
            f"manifest must be a dict, YAML text or a file path, got {type(manifest).__name__}"
        )
    import yaml

    text = manifest
    if "\n" not in manifest and manifest.strip().endswith((".yaml", ".yml", ".json")):
        path = Path(manifest)
        if not path.is_file():
            raise KubeRaySpecError(f"manifest file {manifest!r} does not exist")
        text = path.read_text()
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise KubeRaySpecError(f"manifest is not valid YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise KubeRaySpecError("manifest must be one YAML mapping (a RayCluster object)")
    return loaded


def prepare_manifest(
    manifest: dict[str, Any] | str,
    *,
    name: str,
    labels: dict[str, str],
    annotations: dict[str, str],
) -> dict[str, Any]:
    """Validate a user manifest and add only the provider's ownership labels and annotations.

    :param name: used when the manifest has no ``metadata.name``; a name in the manifest is kept.
    """
    body = load_manifest(manifest)
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise KubeRaySpecError(
            f"manifest must have apiVersion {API_VERSION!r} and kind {KIND!r}, "
            f"got {body.get('apiVersion')!r} / {body.get('kind')!r}"
        )
    validate_manifest_spec(body.get("spec"))
    metadata = body.setdefault("metadata", {}) or {}
    body["metadata"] = metadata
    metadata.setdefault("name", name)
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    rules.check_raycluster(body)
    check_supported_auth(body["spec"])
    return body


def check_supported_auth(spec: dict[str, Any]) -> None:
    """Refuse ``authOptions.enableK8sTokenAuth``: the provider could never tell such a cluster is ready.

    With it, the dashboard accepts only Kubernetes service-account tokens (checked by TokenReview), not the
    Ray token from a Secret; the provider's readiness probe and job submissions send the Ray token, so the
    dashboard would answer 401 until the timeout.
    """
    if ((spec.get("authOptions") or {}).get("enableK8sTokenAuth")) is True:
        raise KubeRaySpecError(
            "manifest spec.authOptions.enableK8sTokenAuth: true is not supported by this provider: the "
            "dashboard then accepts only Kubernetes service-account tokens, while the provider probes it "
            "and submits jobs with the Ray token; drop enableK8sTokenAuth (keep mode: token) or use "
            "mode: disabled"
        )


def validate_manifest_spec(spec: Any) -> None:
    """Cheap structural checks of a manifest's ``spec`` (the API server does the rest)."""
    if not isinstance(spec, dict) or not isinstance(spec.get("headGroupSpec"), dict):
        raise KubeRaySpecError("manifest spec.headGroupSpec is required (the head pod template)")
    unknown = sorted(set(spec) - KNOWN_SPEC_FIELDS)
    if unknown:
        raise KubeRaySpecError(
            f"manifest spec has unknown field(s) {unknown}; RayCluster (KubeRay 1.7) spec fields are "
            f"{sorted(KNOWN_SPEC_FIELDS)}"
        )
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list):
        raise KubeRaySpecError("manifest spec.workerGroupSpecs must be a list")
    for index, group in enumerate(groups):
        where = f"manifest spec.workerGroupSpecs[{index}]"
        if not isinstance(group, dict):
            raise KubeRaySpecError(f"{where} must be a mapping")
        for key in ("replicas", "minReplicas", "maxReplicas"):
            value = group.get(key, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise KubeRaySpecError(f"{where}.{key} must be a non-negative integer, got {value!r}")
        if group.get("minReplicas", 0) > group.get("maxReplicas", 2**31):
            raise KubeRaySpecError(f"{where}: minReplicas must not exceed maxReplicas")
        v.check_dns_label(group.get("groupName"), f"{where}.groupName")


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
