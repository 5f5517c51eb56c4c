"""What Kubernetes and KubeRay refuse, checked before any API call (:func:`check_raycluster`: the rules of
KubeRay 1.7's ``utils/validation.go`` on a final body); and the layer's base errors.
"""

from __future__ import annotations

import re
from typing import Any

MAX_CLUSTER_NAME = 53  # KubeRay's MaxRayClusterNameLength
RAYJOB_NAME_MAX = 47  # KubeRay's MaxRayJobNameLength
SECRET_NAME_MAX = 50  # utils.CheckName: KubeRay keeps the last 50 characters
MIN_TOKEN_AUTH_RAY = (2, 52, 0)
MIN_K8S_TOKEN_AUTH_RAY = (2, 55, 0)
FT_ANNOTATION = "ray.io/ft-enabled"
EXTERNAL_STORAGE_NS_ANNOTATION = "ray.io/external-storage-namespace"
TOLERATION_OPERATORS = ("Equal", "Exists")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
_RAY_START_RESOURCES = ("num-cpus", "num-gpus", "memory", "resources")

_DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Kubernetes' quantity grammar without a sign: decimal SI, binary SI or a decimal exponent ("1e3").
_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# k8s.io/apimachinery version.ParseGeneric: "v"? then at least two dot-separated numbers; the rest is ignored
_GENERIC_VERSION = re.compile(r"^\s*v?([0-9]+(?:\.[0-9]+)+)(.*)$")


class KubeRayError(RuntimeError):
    """Base class of every error raised by :mod:`airflow_ray_provider.kuberay`."""


class KubeRaySpecError(KubeRayError, ValueError):
    """A spec, manifest or RayJob is invalid; raised before any API call. The message says what to fix."""


def _refuse(field: str, rule: str, kuberay: bool = True) -> KubeRaySpecError:
    why = " (KubeRay's controller refuses this and writes no status)" if kuberay else ""
    return KubeRaySpecError(f"{field}: {rule}{why}")


def refuse_first(*rules: tuple[Any, str]) -> None:
    """Raise :class:`KubeRaySpecError` with the message of the first ``(broken, message)`` rule broken."""
    for broken, message in rules:
        if broken:
            raise KubeRaySpecError(message)


# ---------------------------------------------------------------------------------------------- syntax
#: What a name may be: kind -> (pattern, max length, what a refusal says after the name).
_NAMES: dict[str, tuple[re.Pattern[str], int, str]] = {
    "label": (_DNS1123_LABEL, 63, "is not a valid DNS-1123 label: use at most 63 lowercase letters, digits "
              "and '-', starting and ending with a letter or digit"),
    "subdomain": (_DNS1123_SUBDOMAIN, 253, "is not a valid DNS-1123 subdomain: at most 253 lowercase "
                  "letters, digits, '-' and '.', starting and ending with a letter or digit (e.g. 'ray-jobs' "
                  "or 'ray.jobs')"),
    "rayjob": (_DNS1035_LABEL, RAYJOB_NAME_MAX, f"is not valid: use at most {RAYJOB_NAME_MAX} lowercase "
               "letters, digits and '-', starting with a letter and ending with a letter or digit (e.g. "
               "'nightly-eval')"),
}  # fmt: skip


def check_name(value: Any, where: str, kind: str = "label") -> None:
    """A name of ``kind``: a DNS-1123 ``label`` (namespaces, group names), a ``subdomain`` (service accounts,
    Secrets such as ``ray.jobs``) or a ``rayjob`` name (a DNS-1035 label KubeRay caps at 47 characters)."""
    pattern, limit, rule = _NAMES[kind]
    if not isinstance(value, str) or len(value) > limit or not pattern.match(value):
        raise KubeRaySpecError(f"{where} {value!r} {rule}")


def check_quantity(value: Any, where: str) -> None:
    """A Kubernetes resource quantity such as ``500m``, ``2`` or ``8Gi``."""
    if isinstance(value, bool) or not _QUANTITY.match(str(value)):
        raise KubeRaySpecError(f"{where} {value!r} is not a Kubernetes quantity (e.g. '500m', '2', '8Gi')")


def check_count(value: Any, where: str, *, minimum: int = 0) -> None:
    """A whole number (a count, or seconds) of at least ``minimum``; ``None`` (unset) passes."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        kind = "a positive integer" if minimum > 0 else "a non-negative integer"
        raise KubeRaySpecError(f"{where} must be {kind}, got {value!r}")


def check_string_map(value: Any, where: str) -> None:
    """A dict of str to str (annotations, rayStartParams, environment)."""
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(x, str) for k, x in value.items()
    ):
        raise KubeRaySpecError(
            f"{where} must map strings to strings (quote numbers, e.g. {{'num-cpus': '0'}})"
        )


def check_env(value: Any, where: str) -> None:
    """Environment variables: valid names, string values."""
    check_string_map(value, where)
    for name in value:
        if not _ENV_NAME.match(name):
            raise KubeRaySpecError(f"{where} has an invalid variable name {name!r}")


def is_qualified_name(key: Any) -> bool:
    """``IsQualifiedName``: an optional DNS-subdomain prefix and ``/``, then a name of <= 63 characters."""
    if not isinstance(key, str):
        return False
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def check_labels(value: Any, where: str, *, kuberay: bool = False) -> None:
    """Labels or a node selector; ``kuberay``: a rule KubeRay applies to the body (the message says so)."""
    if not isinstance(value, dict):
        raise _refuse(where, "must map label keys to values", kuberay)
    for key, item in value.items():
        if not is_qualified_name(key):
            rule = "not a qualified name ('[prefix/]name', name <= 63 chars)"
            raise _refuse(f"{where} key {key!r}", rule, kuberay)
        if not isinstance(item, str) or len(item) > 63 or not _LABEL_VALUE.match(item):
            raise _refuse(
                f"{where}[{key!r}] value {item!r}", "not a valid label value (<= 63 chars)", kuberay
            )


def check_tolerations(tolerations: Any, where: str) -> None:
    """Kubernetes' toleration rules (``ValidateTolerations``), which KubeRay's pods must pass."""
    if not isinstance(tolerations, list):
        raise _refuse(where, "must be a list of tolerations")
    for index, item in enumerate(tolerations):
        at = f"{where}[{index}]"
        if not isinstance(item, dict) or set(item) - set(TOLERATION_FIELDS):
            raise _refuse(at, f"must be a mapping with keys among {list(TOLERATION_FIELDS)}")
        key, operator, value = item.get("key") or "", item.get("operator") or "Equal", item.get("value")
        if operator not in TOLERATION_OPERATORS:
            raise _refuse(f"{at}.operator {operator!r}", f"must be one of {list(TOLERATION_OPERATORS)}")
        if key and not is_qualified_name(key):
            raise _refuse(f"{at}.key {key!r}", "not a qualified name")
        if not key and operator != "Exists":
            raise _refuse(f"{at}.operator", "must be 'Exists' when key is empty")
        if operator == "Exists" and value:
            raise _refuse(f"{at}.value {value!r}", "must be empty when operator is 'Exists'")
        if operator == "Equal" and value and not _LABEL_VALUE.match(str(value)):
            raise _refuse(f"{at}.value {value!r}", "not a valid label value")
        effect = item.get("effect") or ""
        if effect and effect not in TOLERATION_EFFECTS:
            raise _refuse(f"{at}.effect {effect!r}", f"must be one of {list(TOLERATION_EFFECTS)} or empty")
        if item.get("tolerationSeconds") is not None and effect != "NoExecute":
            raise _refuse(f"{at}.tolerationSeconds", "only valid with effect 'NoExecute'")


def version_tuple(text: str) -> tuple[int, int, int]:
    """A version's first three numbers, missing ones as 0 (``2.52`` -> ``(2, 52, 0)``)."""
    major, minor, patch = ([int(x) for x in re.findall(r"[0-9]+", text)[:3]] + [0, 0, 0])[:3]
    return major, minor, patch


# ---------------------------------------------------------------------------------------------- naming
def check_cluster_name(name: Any, field: str = "cluster name") -> None:
    """A RayCluster name: a DNS-1035 label of at most 53 characters (KubeRay's metadata rule)."""
    if not isinstance(name, str) or not _DNS1035_LABEL.match(name):
        raise _refuse(
            f"{field} {name!r}",
            "RayCluster name should be a valid DNS1035 label: lowercase letters, digits and '-', starting "
            "with a letter and ending with a letter or digit (e.g. 'nightly-eval')",
        )
    if len(name) > MAX_CLUSTER_NAME:
        raise _refuse(
            f"{field} {name!r} ({len(name)} characters)",
            f"RayCluster name should be no more than {MAX_CLUSTER_NAME} characters",
        )


def kuberay_secret_name(cluster_name: str) -> str:
    """The token Secret KubeRay generates for ``authOptions.mode: token`` (its ``utils.CheckName``: the last
    50 characters; a leading digit or punctuation becomes ``r``)."""
    name = cluster_name[-SECRET_NAME_MAX:] if len(cluster_name) > SECRET_NAME_MAX else cluster_name
    if name and (name[0].isdigit() or not name[0].isalnum()):
        name = "r" + name[1:]
    return name


# ---------------------------------------------------------------------------------------------- body
def check_raycluster(body: dict[str, Any]) -> None:
    """Every KubeRay controller rule that applies to a RayCluster body; raises at the first broken one."""
    metadata = body.get("metadata") or {}
    check_cluster_name(metadata.get("name"))
    spec = body.get("spec") or {}
    groups = [("spec.headGroupSpec", "Head", spec.get("headGroupSpec") or {})] + [
        (f"spec.workerGroupSpecs[{i}]", g.get("groupName", "?"), g)
        for i, g in enumerate(spec.get("workerGroupSpecs") or [])
    ]
    for where, _, group in groups[1:]:  # what the CRD's schema refuses first
        check_name(group.get("groupName"), f"{where}.groupName")
        for key in ("replicas", "minReplicas", "maxReplicas"):
            check_count(group.get(key, 0), f"{where}.{key}")
        if group.get("minReplicas", 0) > group.get("maxReplicas", 2**31):
            raise KubeRaySpecError(f"{where}: minReplicas must not exceed maxReplicas")
    for where, name, group in groups:
        _check_group(where, name, group)
    autoscaling = bool(spec.get("enableInTreeAutoscaling"))
    for where, name, group in groups[1:]:
        if not autoscaling and ("minReplicas" not in group or "maxReplicas" not in group):
            raise _refuse(
                f"{where} ({name!r})",
                "worker groups need both minReplicas and maxReplicas when enableInTreeAutoscaling is off",
            )
        if group.get("suspend"):
            rule = "cannot be suspended with the autoscaler enabled" if autoscaling else (
                "can be suspended only when the RayJobDeletionPolicy feature gate is enabled"
            )  # fmt: skip
            raise _refuse(f"{where}.suspend", f"worker group {name!r} {rule}")
    _check_gcs_fault_tolerance(spec, metadata.get("annotations") or {})
    _check_autoscaler(spec, autoscaling, groups)
    check_auth_options(spec)


def _containers(group: dict[str, Any]) -> list[dict[str, Any]]:
    return ((group.get("template") or {}).get("spec") or {}).get("containers") or []


def _env(container: dict[str, Any]) -> dict[Any, Any]:
    return {e.get("name"): e for e in container.get("env") or [] if isinstance(e, dict)}


def _check_group(where: str, name: str, group: dict[str, Any]) -> None:
    if not _containers(group):
        raise _refuse(f"{where}.template.spec.containers", f"the {name} group needs at least one container")
    params = group.get("rayStartParams") or {}
    if group.get("resources") and any(params.get(key) for key in _RAY_START_RESOURCES):
        raise _refuse(
            f"{where}.resources",
            f"resource fields should not be set in both rayStartParams and resources for the {name} "
            "group; use only one",
        )
    if "labels" in params:
        raise _refuse(f"{where}.rayStartParams.labels", "not supported; use the group's labels field")
    check_labels(group.get("labels") or {}, f"{where}.labels", kuberay=True)
    pod = (group.get("template") or {}).get("spec") or {}
    check_labels(pod.get("nodeSelector") or {}, f"{where}.template.spec.nodeSelector", kuberay=True)
    check_tolerations(pod.get("tolerations") or [], f"{where}.template.spec.tolerations")


def _check_gcs_fault_tolerance(spec: dict[str, Any], annotations: dict[str, Any]) -> None:
    head = spec.get("headGroupSpec") or {}
    env = _env(_containers(head)[0])
    params = head.get("rayStartParams") or {}
    ft_options = spec.get("gcsFaultToleranceOptions")
    if annotations.get(FT_ANNOTATION) and ft_options is not None:
        raise _refuse(
            f"metadata.annotations[{FT_ANNOTATION!r}]",
            "the annotation and spec.gcsFaultToleranceOptions are both set; use only the options",
        )
    ft_enabled = ft_options is not None or str(annotations.get(FT_ANNOTATION, "")).lower() == "true"
    if not ft_enabled and "RAY_REDIS_ADDRESS" in env:
        raise _refuse(
            "spec.headGroupSpec env RAY_REDIS_ADDRESS",
            "it implicitly enables GCS fault tolerance; set spec.gcsFaultToleranceOptions instead",
        )
    if ft_options is not None:
        for bad, fix in (
            (params.get("redis-password"), "rayStartParams redis-password: use its redisPassword"),
            ("REDIS_PASSWORD" in env, "env REDIS_PASSWORD: use its redisPassword"),
            ("RAY_REDIS_ADDRESS" in env, "env RAY_REDIS_ADDRESS: use its redisAddress"),
            (annotations.get(EXTERNAL_STORAGE_NS_ANNOTATION),
             f"annotation {EXTERNAL_STORAGE_NS_ANNOTATION}: use its externalStorageNamespace"),
        ):  # fmt: skip
            if bad:
                raise _refuse("spec.headGroupSpec", f"with spec.gcsFaultToleranceOptions, do not set {fix}")
    if params.get("redis-username") or "REDIS_USERNAME" in env:
        raise _refuse("spec.headGroupSpec", "redis username: use gcsFaultToleranceOptions.redisUsername")


def _check_autoscaler(spec: dict[str, Any], autoscaling: bool, groups: list[tuple[str, str, dict]]) -> None:
    v2_env = _env(_containers(groups[0][2])[0]).get("RAY_enable_autoscaler_v2")
    v2_by_env = v2_env is not None and v2_env.get("value") in ("1", "true")
    if not autoscaling:
        if v2_by_env:
            raise _refuse(
                "spec.headGroupSpec env RAY_enable_autoscaler_v2",
                "cannot be '1' or 'true' when enableInTreeAutoscaling is false",
            )
        return
    options = spec.get("autoscalerOptions") or {}
    if options.get("version") and v2_env is not None:
        raise _refuse(
            "spec.autoscalerOptions.version",
            "both it and the head env var RAY_enable_autoscaler_v2 are set; use only the former",
        )
    if options.get("version") != "v2" and not v2_by_env:
        return
    for where, _, group in groups:
        policy = ((group.get("template") or {}).get("spec") or {}).get("restartPolicy")
        if policy not in (None, "", "Never"):
            raise _refuse(f"{where}.template.spec.restartPolicy", "must be Never or unset with autoscaler v2")


def check_auth_options(spec: dict[str, Any]) -> None:
    """``authOptions.mode: token`` needs ``rayVersion`` >= 2.52.0 (``enableK8sTokenAuth``: >= 2.55.0)."""
    auth = spec.get("authOptions") or {}
    if auth.get("mode") != "token":
        return
    k8s = bool(auth.get("enableK8sTokenAuth"))
    minimum = MIN_K8S_TOKEN_AUTH_RAY if k8s else MIN_TOKEN_AUTH_RAY
    wanted = ".".join(map(str, minimum))
    what = "authOptions.enableK8sTokenAuth" if k8s else "authOptions.mode is 'token'"
    raw = spec.get("rayVersion")
    match = _GENERIC_VERSION.match(raw) if isinstance(raw, str) else None
    if not raw:
        rule = f"{what} but rayVersion is not set; Ray {wanted} or later is required"
    elif match is None:
        rule = f"{what} but the version is not parsable (use e.g. '{wanted}', not a tag like 'latest')"
    elif version_tuple(match.group(1)) < minimum:
        rule = f"{what} but the minimum Ray version is {wanted}"
    else:
        return
    raise _refuse(f"spec.rayVersion {raw!r}" if raw else "spec.rayVersion", rule)
