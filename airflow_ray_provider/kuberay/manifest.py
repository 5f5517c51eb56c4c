"""A user's RayCluster manifest: loaded (one RayCluster out of a multi-document file), checked, owned.

The manifest is sent as written apart from ``metadata``: the per-run name (or the pinned
``cluster_name``), the target namespace, and the provider's ownership labels and annotations. Companion
documents of a file (the ConfigMaps, Secrets and Services many KubeRay samples carry) are not created:
they are named in a warning, to be applied beforehand. Every check runs before any API call, KubeRay's
controller rules included (:func:`~airflow_ray_provider.kuberay.validation.check_raycluster`).
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

from airflow_ray_provider.kuberay import validation as v
from airflow_ray_provider.kuberay.spec import API_VERSION, KIND
from airflow_ray_provider.kuberay.validation import KubeRaySpecError

log = logging.getLogger(__name__)
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
    """The one RayCluster of a manifest: a dict, YAML/JSON text, or a file path (absolute or relative).

    A multi-document file may hold other objects (ConfigMaps, Secrets...): they are ignored with a warning
    naming them. No RayCluster, or more than one, is an error.
    """
    documents = _documents(manifest)
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


def _documents(manifest: dict[str, Any] | str) -> list[dict[str, Any]]:
    if isinstance(manifest, dict):
        return [copy.deepcopy(manifest)]
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
        loaded = [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        raise KubeRaySpecError(f"manifest is not valid YAML: {exc}") from exc
    if not loaded or not all(isinstance(doc, dict) for doc in loaded):
        raise KubeRaySpecError("manifest must be YAML mappings, one of them a RayCluster object")
    return loaded


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
    """Validate a user manifest; set its name and namespace and add the provider's ownership metadata.

    :param name: the cluster's name (per run, or the pinned ``cluster_name``); it replaces the manifest's,
        so two runs of one DAG never collide on a fixed name.
    :param namespace: where it is created; a different ``metadata.namespace`` in the manifest is an error.
    """
    body = load_manifest(manifest)
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise KubeRaySpecError(
            f"manifest must have apiVersion {API_VERSION!r} and kind {KIND!r}, "
            f"got {body.get('apiVersion')!r} / {body.get('kind')!r}"
        )
    validate_manifest_spec(body.get("spec"))
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
