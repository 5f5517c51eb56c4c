"""The RayCluster body: built from a :class:`RayClusterSpec`, or a user's manifest sent as written apart from
``metadata`` (per-run name, namespace, ownership). Every check runs before any API call.
"""

from __future__ import annotations

import copy
import importlib.metadata
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_ray_provider.kuberay import validation as v
from airflow_ray_provider.kuberay.spec import (
    API_VERSION,
    AUTH_TOKEN_KEY,
    KIND,
    LABEL_KUEUE_QUEUE,
    HeadGroup,
    RayClusterSpec,
    WorkerGroup,
    validate_spec,
)
from airflow_ray_provider.kuberay.validation import KubeRaySpecError

log = logging.getLogger(__name__)
DEFAULT_REPOSITORY = "rayproject/ray"
HEAD_PORTS = [
    {"containerPort": 6379, "name": "gcs-server"},
    {"containerPort": 8265, "name": "dashboard"},
    {"containerPort": 10001, "name": "client"},
]
_TAG_VERSION = re.compile(r"^v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)(?![0-9])")


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
    """Validate a spec and build its RayCluster body (no API call); ownership ``labels`` and ``annotations``
    are merged over the spec's, ``default_image`` (the connection's) is used when the spec has none."""
    validate_spec(spec)
    v.check_name(namespace, "namespace")
    ray_version, head_image, worker_images = _images(spec, default_image)
    token = TokenRef(token_secret_name(name), provider_created=True) if spec.auth == "secret" else None
    body_spec: dict[str, Any] = {
        "rayVersion": ray_version,
        "headGroupSpec": _group(spec.head, spec, head_image, token),
        "workerGroupSpecs": [
            _group(g, spec, image, token) for g, image in zip(spec.worker_groups, worker_images, strict=True)
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
    queue = {LABEL_KUEUE_QUEUE: spec.queue_name} if spec.queue_name is not None else {}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {**spec.labels, **queue, **(labels or {})},
        "annotations": {**spec.annotations, **(annotations or {})},
    }
    body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body_spec}
    v.check_raycluster(body)
    return body


def _secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def _group(
    group: HeadGroup | WorkerGroup, spec: RayClusterSpec, image: str, token: TokenRef | None
) -> dict[str, Any]:
    """A group's spec: its pod's one container, its placement, then what :class:`PodOptions` asks of every
    pod."""
    pods, head = spec.pods, isinstance(group, HeadGroup)
    limits: dict[str, str] = {"cpu": str(group.cpu), "memory": str(group.memory), **group.resources}
    if isinstance(group, WorkerGroup) and group.gpu:
        limits["nvidia.com/gpu"] = str(group.gpu)
    env: list[dict[str, Any]] = [{"name": key, "value": value} for key, value in sorted(spec.env.items())]
    if token is not None:
        # Without authOptions, Ray reads its token from these two variables on every node.
        env.append({"name": "RAY_AUTH_MODE", "value": "token"})
        env.append(_secret_env("RAY_AUTH_TOKEN", token.secret_name, token.key))
    env += [_secret_env(var, *ref.split("/", 1)) for var, ref in sorted(pods.secret_env.items())]
    container: dict[str, Any] = {
        "name": "ray-head" if head else "ray-worker",
        "image": image,
        "resources": {"requests": dict(limits), "limits": limits},
        "env": env,
        "envFrom": [{"secretRef": {"name": secret}} for secret in pods.env_from_secrets],
        "volumeMounts": copy.deepcopy(pods.volume_mounts),
        "ports": copy.deepcopy(HEAD_PORTS) if head else [],
    }
    pod: dict[str, Any] = {
        "containers": [{key: value for key, value in container.items() if value != []}],
        "nodeSelector": dict(group.node_selector),
        "tolerations": copy.deepcopy(group.tolerations),
        "affinity": copy.deepcopy(group.affinity),
        "serviceAccountName": spec.service_account,
        "imagePullSecrets": [{"name": name} for name in pods.image_pull_secrets],
        "priorityClassName": pods.priority_class_name,
        "volumes": copy.deepcopy(pods.volumes),
    }
    template: dict[str, Any] = {"spec": {key: value for key, value in pod.items() if value}}
    metadata = {"labels": dict(pods.labels), "annotations": dict(pods.annotations)}
    if any(metadata.values()):
        template["metadata"] = {key: value for key, value in metadata.items() if value}
    params = dict(group.ray_start_params)
    if isinstance(group, WorkerGroup):
        low, high = group.effective_min, group.effective_max
        counts = {"replicas": group.replicas, "minReplicas": low, "maxReplicas": high}
        return {"groupName": group.name, **counts, "rayStartParams": params, "template": template}
    if spec.enable_autoscaling:
        params.setdefault("num-cpus", "0")  # with an autoscaler, work goes to workers, not the head
    service = {"serviceType": group.service_type} if group.service_type else {}
    return {"rayStartParams": params, "template": template, **service}


def token_ref_of(body: dict[str, Any]) -> TokenRef | None:
    """Where a RayCluster body keeps its auth token: ``authOptions`` or a ``RAY_AUTH_TOKEN`` secretKeyRef."""
    spec = body.get("spec") or {}
    auth = spec.get("authOptions") or {}
    name = (body.get("metadata") or {}).get("name", "")
    if auth.get("mode") == "token":
        # KubeRay names its generated Secret after the cluster unless secretName is set.
        return TokenRef(auth.get("secretName") or v.kuberay_secret_name(name))
    for container in v._containers(spec.get("headGroupSpec") or {}):
        env = v._env(container).get("RAY_AUTH_TOKEN") or {}
        ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
        if ref.get("name"):
            provider = ref["name"] == token_secret_name(name)
            return TokenRef(ref["name"], ref.get("key", AUTH_TOKEN_KEY), provider_created=provider)
    return None


def tag_version(image: str) -> str | None:
    """The Ray version an image's tag starts with (``2.52.0`` of ``rayproject/ray:2.52.0-gpu``), if any."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    match = _TAG_VERSION.match(name.split(":", 1)[1] if ":" in name else "")
    return match.group(1) if match else None


def _images(spec: RayClusterSpec, default_image: str | None) -> tuple[str, str, list[str]]:
    """The Ray version, the head's image and each worker group's (GPU groups on the default image: ``-gpu``).

    KubeRay gates features on ``rayVersion`` while the image decides what runs: a tag that starts with a
    version must agree with it; one without (``latest``) is logged."""
    cluster_image = spec.image or default_image
    where = "spec.image" if spec.image else "the connection's default_image"
    # The Ray installed here (a dependency: the cluster matches the client), read without importing ray.
    installed = importlib.metadata.version("ray")
    ray_version = spec.ray_version or (cluster_image and tag_version(cluster_image)) or installed
    explicit = [(where, cluster_image)] if cluster_image else []
    explicit += [
        (f"spec.worker_groups[{i}].image", g.image) for i, g in enumerate(spec.worker_groups) if g.image
    ]
    for field, image in explicit:
        version = tag_version(str(image))
        if version is None:
            log.warning(
                "%s %r has no Ray version in its tag; assuming it runs Ray %s", field, image, ray_version
            )
        elif v.version_tuple(version) != v.version_tuple(ray_version):
            raise KubeRaySpecError(
                f"{field} {image!r} is Ray {version} but the cluster's ray_version is {ray_version}; KubeRay "
                f"gates features on rayVersion, so make them agree (set ray_version={version!r} or use a "
                f"{ray_version} image)"
            )
    head = cluster_image or f"{DEFAULT_REPOSITORY}:{ray_version}"
    gpu = f"{DEFAULT_REPOSITORY}:{ray_version}-gpu"
    workers = [g.image or (gpu if g.gpu and not cluster_image else head) for g in spec.worker_groups]
    return ray_version, head, workers


MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")

# RayClusterSpec fields of KubeRay 1.7 (ray.io_rayclusters.yaml); a manifest with another key is rejected
# here because a real API server silently prunes unknown fields unless asked for strict validation.
KNOWN_SPEC_FIELDS = frozenset(
    {
        "authOptions", "autoscalerOptions", "enableInTreeAutoscaling", "gcsFaultToleranceOptions",
        "headGroupSpec", "headServiceAnnotations", "historyServerOptions", "managedBy", "networkPolicy",
        "rayVersion", "suspend", "tlsOptions", "upgradeStrategy", "workerGroupSpecs",
    }
)  # fmt: skip


def load_manifest(manifest: dict[str, Any] | str) -> dict[str, Any]:
    """The one RayCluster of a manifest: a dict, YAML/JSON text, or a file path (absolute or relative);
    other documents of the file are ignored with a warning naming them."""
    if isinstance(manifest, dict):
        return copy.deepcopy(manifest)
    if not isinstance(manifest, str):
        raise KubeRaySpecError(
            f"manifest must be a dict, YAML text or a file path, got {type(manifest).__name__}"
        )
    import yaml

    text = manifest
    if "\n" not in manifest and manifest.strip().endswith(MANIFEST_SUFFIXES):
        path = Path(manifest.strip()).expanduser()
        if not path.is_file():
            raise KubeRaySpecError(f"manifest file {str(path.absolute())!r} does not exist")
        text = path.read_text()
    try:
        documents = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise KubeRaySpecError(f"manifest is not valid YAML: {exc}") from exc
    if not documents or not all(isinstance(doc, dict) for doc in documents):
        raise KubeRaySpecError("manifest must be YAML mappings, one of them a RayCluster object")
    clusters = [d for d in documents if d.get("kind") == KIND]
    if len(documents) == 1 and not clusters:
        return documents[0]  # prepare_manifest says which apiVersion/kind it has instead
    if not clusters:
        raise KubeRaySpecError(f"manifest has no RayCluster document (found {_names(documents)})")
    if len(clusters) > 1:
        raise KubeRaySpecError(
            f"manifest has {len(clusters)} RayCluster documents ({_names(clusters)}); one task creates one "
            "cluster: split the file"
        )
    others = [d for d in documents if d is not clusters[0]]
    if others:
        log.warning(
            "manifest: creating only its RayCluster; ignoring %d other document(s): %s. The provider does "
            "not create them: apply them to the namespace beforehand (kubectl apply -f).",
            len(others), _names(others),
        )  # fmt: skip
    return clusters[0]


def _names(documents: list[dict[str, Any]]) -> str:
    return ", ".join(f"{d.get('kind')}/{(d.get('metadata') or {}).get('name', '?')}" for d in documents)


def prepare_manifest(
    manifest: dict[str, Any] | str,
    *,
    name: str,
    namespace: str,
    labels: dict[str, str],
    annotations: dict[str, str],
) -> dict[str, Any]:
    """Validate a user manifest; set its name (per run, or the pinned ``cluster_name``, so two runs never
    collide on a fixed name) and namespace, and add the provider's ownership metadata."""
    body = load_manifest(manifest)
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise KubeRaySpecError(
            f"manifest must have apiVersion {API_VERSION!r} and kind {KIND!r}, "
            f"got {body.get('apiVersion')!r} / {body.get('kind')!r}"
        )
    spec = body.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("headGroupSpec"), dict):
        raise KubeRaySpecError("manifest spec.headGroupSpec is required (the head pod template)")
    unknown = sorted(set(spec) - KNOWN_SPEC_FIELDS)
    if unknown:
        raise KubeRaySpecError(
            f"manifest spec has unknown field(s) {unknown}; RayCluster (KubeRay 1.7) spec fields are "
            f"{sorted(KNOWN_SPEC_FIELDS)}"
        )
    groups = spec.get("workerGroupSpecs") or []
    if not isinstance(groups, list) or not all(isinstance(group, dict) for group in groups):
        raise KubeRaySpecError("manifest spec.workerGroupSpecs must be a list of mappings")
    metadata = body.get("metadata") or {}
    body["metadata"] = metadata
    own_namespace = metadata.get("namespace")
    if own_namespace and own_namespace != namespace:
        raise KubeRaySpecError(
            f"manifest metadata.namespace {own_namespace!r} differs from the namespace the cluster is "
            f"created in ({namespace!r}: the operator's namespace, else the connection's); drop it from the "
            f"manifest or pass namespace={own_namespace!r}"
        )
    if metadata.get("name") not in (None, name):
        log.info(
            "manifest metadata.name %r replaced by %r (pin a name with cluster_name)", metadata["name"], name
        )
    metadata.update(name=name, namespace=namespace)
    metadata["labels"] = {**(metadata.get("labels") or {}), **labels}
    metadata["annotations"] = {**(metadata.get("annotations") or {}), **annotations}
    v.check_raycluster(body)
    # With enableK8sTokenAuth the dashboard accepts only service-account tokens: the provider's probe and
    # submissions (with the Ray token) would get 401 until the timeout.
    if ((spec.get("authOptions") or {}).get("enableK8sTokenAuth")) is True:
        raise KubeRaySpecError(
            "manifest spec.authOptions.enableK8sTokenAuth: true is not supported by this provider: the "
            "dashboard then accepts only Kubernetes service-account tokens, while the provider probes it "
            "and submits jobs with the Ray token; drop enableK8sTokenAuth (keep mode: token) or use "
            "mode: disabled"
        )
    return body
