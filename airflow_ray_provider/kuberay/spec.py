"""The typed RayCluster spec (what to provision, pod options included) and its validation; :mod:`.builder`
turns it into a body, the local backend into CPUs and GPUs.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, TypeVar

from airflow_ray_provider.kuberay import validation as v
from airflow_ray_provider.kuberay.validation import KubeRaySpecError

API_VERSION = "ray.io/v1"
KIND = "RayCluster"
AUTH_TOKEN_KEY = "auth_token"  # KubeRay's RAY_AUTH_TOKEN_SECRET_KEY
AUTH_MODES = ("auth_options", "secret", "disabled")
HEAD_SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer")
AFFINITY_KINDS = ("nodeAffinity", "podAffinity", "podAntiAffinity")
LABEL_KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


@dataclass(frozen=True)
class _PodGroup:
    """What head and worker pods share (keyword-only): ``cpu`` and ``memory`` are the request and limit per
    pod (Kubernetes quantities), ``ray_start_params`` values are strings (``{"num-cpus": "0"}``) and
    ``resources`` are extended resources per pod (``{"google.com/tpu": "4"}``, requests = limits)."""

    _: KW_ONLY
    cpu: str = "2"
    memory: str = "8Gi"
    ray_start_params: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    affinity: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HeadGroup(_PodGroup):
    """The head pod: the fields of every pod, and its Service's type (``ClusterIP``, ``NodePort``, ...)."""

    service_type: str | None = None


@dataclass(frozen=True)
class WorkerGroup(_PodGroup):
    """One worker group; several make a heterogeneous cluster (e.g. CPU and spot GPU).

    :param min_replicas: lower bound for the autoscaler (default: ``replicas``).
    :param max_replicas: upper bound for the autoscaler (default: ``max(replicas, min_replicas)``).
    :param gpu: ``nvidia.com/gpu`` per pod.
    :param image: default: the cluster's image (``-gpu`` for GPU groups on the default image).
    """

    name: str
    replicas: int = 1
    min_replicas: int | None = None
    max_replicas: int | None = None
    gpu: int = 0
    image: str | None = None

    @property
    def effective_min(self) -> int:
        """The minimum replicas sent to KubeRay."""
        return self.replicas if self.min_replicas is None else self.min_replicas

    @property
    def effective_max(self) -> int:
        """The maximum replicas sent to KubeRay."""
        return max(self.replicas, self.effective_min) if self.max_replicas is None else self.max_replicas


@dataclass(frozen=True)
class PodOptions:
    """Options of every Ray pod (docs/operators.md, "Production pods"): ``labels`` and ``annotations`` go
    on the pods, ``secret_env`` is ``{"VAR": "secret-name/key"}``, ``env_from_secrets`` become ``envFrom``."""

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict)
    env_from_secrets: list[str] = field(default_factory=list)
    image_pull_secrets: list[str] = field(default_factory=list)
    priority_class_name: str | None = None
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class RayClusterSpec:
    """What to provision; the same spec drives KubeRay and (summarised) the local backend.

    :param image: default: the connection's default image, else ``rayproject/ray:<ray_version>``.
    :param ray_version: default: the image tag's version, else the Ray installed here.
    :param auth: ``auth_options``, ``secret`` or ``disabled`` (docs/operators.md, "Token auth is on");
        ``None``: the connection's ``ray_auth``.
    :param queue_name: a Kueue LocalQueue: the cluster is created suspended and Kueue starts it once admitted.
    """

    image: str | None = None
    ray_version: str | None = None
    head: HeadGroup = field(default_factory=HeadGroup)
    worker_groups: list[WorkerGroup] = field(default_factory=list)
    enable_autoscaling: bool = False
    autoscaler_idle_timeout_seconds: int | None = None
    env: dict[str, str] = field(default_factory=dict)
    service_account: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    auth: str | None = None
    pods: PodOptions = field(default_factory=PodOptions)
    queue_name: str | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any] | RayClusterSpec) -> RayClusterSpec:
        """Build a spec from a plain dict (e.g. rendered from a template); unknown keys are rejected."""
        spec = _to_dataclass(cls, data, "spec")
        if not isinstance(spec.worker_groups, list):
            raise KubeRaySpecError("spec.worker_groups must be a list of worker group dicts")
        groups = [
            _to_dataclass(WorkerGroup, g, f"spec.worker_groups[{i}]")
            for i, g in enumerate(spec.worker_groups)
        ]
        return dataclasses.replace(
            spec,
            head=_to_dataclass(HeadGroup, spec.head, "spec.head"),
            pods=_to_dataclass(PodOptions, spec.pods, "spec.pods"),
            worker_groups=groups,
        )

    @property
    def total_cpus(self) -> float:
        """Head plus initial workers' CPUs (what the local backend offers when asked for this spec)."""
        head = _cpu_value(self.head.ray_start_params.get("num-cpus", self.head.cpu))
        return head + sum(_cpu_value(g.cpu) * g.replicas for g in self.worker_groups)

    @property
    def total_gpus(self) -> int:
        """GPUs of the initial workers."""
        return sum(g.gpu * g.replicas for g in self.worker_groups)


_GroupT = TypeVar("_GroupT", HeadGroup, WorkerGroup, PodOptions, RayClusterSpec)


def _to_dataclass(cls: type[_GroupT], data: Any, where: str) -> _GroupT:
    if isinstance(data, cls):
        return data
    if not isinstance(data, dict):
        raise KubeRaySpecError(f"{where} must be a dict, got {type(data).__name__}")
    allowed = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise KubeRaySpecError(f"{where} has unknown field(s) {unknown}; allowed fields: {sorted(allowed)}")
    # Worker-group counts that a templated (Jinja) spec renders as strings such as "3".
    counts = ("replicas", "min_replicas", "max_replicas", "gpu")
    rendered = {
        k: int(x) for k, x in data.items() if k in counts and isinstance(x, str) and x.strip().isdigit()
    }
    return cls(**{**data, **rendered})


def _cpu_value(quantity: str | int | float) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def validate_spec(spec: RayClusterSpec) -> None:
    """Check a spec; raises :class:`KubeRaySpecError` naming the bad field and what to do."""
    service = spec.head.service_type
    v.refuse_first(
        (spec.image is not None and not spec.image.strip(),
         "spec.image is empty; give an image such as rayproject/ray:2.52.0"),
        (spec.auth is not None and spec.auth not in AUTH_MODES,
         f"spec.auth must be one of {list(AUTH_MODES)}, got {spec.auth!r}"),
        (service not in (None, *HEAD_SERVICE_TYPES),
         f"spec.head.service_type must be one of {list(HEAD_SERVICE_TYPES)}, got {service!r}"),
    )  # fmt: skip
    _validate_pod_group(spec.head, "spec.head")
    _validate_pods(spec.pods)
    if spec.queue_name is not None:
        v.check_labels({LABEL_KUEUE_QUEUE: spec.queue_name}, "spec.queue_name")
    v.check_env(spec.env, "spec.env")
    v.check_labels(spec.labels, "spec.labels")
    v.check_string_map(spec.annotations, "spec.annotations")
    if spec.service_account is not None:
        v.check_name(spec.service_account, "spec.service_account", "subdomain")
    v.check_count(spec.autoscaler_idle_timeout_seconds, "spec.autoscaler_idle_timeout_seconds")
    names = [group.name for group in spec.worker_groups]
    for index, group in enumerate(spec.worker_groups):
        where = f"spec.worker_groups[{index}]"
        v.check_name(group.name, f"{where}.name")
        for attr in ("replicas", "min_replicas", "max_replicas", "gpu"):
            v.check_count(getattr(group, attr), f"{where}.{attr}")
        low, high, replicas = group.effective_min, group.effective_max, group.replicas
        v.refuse_first(
            (group.max_replicas is not None and replicas > group.max_replicas,
             f"{where}.replicas ({replicas}) must not exceed max_replicas ({group.max_replicas}); "
             "raise max_replicas or lower replicas"),
            (low > high, f"{where}: min_replicas ({low}) must not exceed max_replicas ({high})"),
            (not low <= replicas <= high,
             f"{where}.replicas ({replicas}) must lie between min_replicas ({low}) "
             f"and max_replicas ({high})"),
            (group.image is not None and not group.image.strip(),
             f"{where}.image is empty; drop it to use the cluster's image"),
        )  # fmt: skip
        _validate_pod_group(group, where)
        if group.name in names[:index]:
            raise KubeRaySpecError(f"worker group name {group.name!r} is used twice; names must be unique")


def _validate_pod_group(group: _PodGroup, where: str) -> None:
    v.check_quantity(group.cpu, f"{where}.cpu")
    v.check_quantity(group.memory, f"{where}.memory")
    v.check_string_map(group.ray_start_params, f"{where}.ray_start_params")
    v.check_labels(group.node_selector, f"{where}.node_selector", kuberay=True)
    v.check_tolerations(group.tolerations, f"{where}.tolerations")
    if not isinstance(group.affinity, dict) or set(group.affinity) - set(AFFINITY_KINDS):
        raise KubeRaySpecError(f"{where}.affinity must be a dict with keys among {list(AFFINITY_KINDS)}")
    v.check_string_map(group.resources, f"{where}.resources")
    for name, quantity in group.resources.items():
        if name in ("cpu", "memory", "nvidia.com/gpu") or not v.is_qualified_name(name):
            raise KubeRaySpecError(
                f"{where}.resources key {name!r}: use an extended resource name such as 'google.com/tpu' "
                "(cpu, memory and gpu have their own fields)"
            )
        v.check_quantity(quantity, f"{where}.resources[{name!r}]")


def _validate_pods(options: PodOptions, where: str = "spec.pods") -> None:
    v.check_labels(options.labels, f"{where}.labels")
    v.check_string_map(options.annotations, f"{where}.annotations")
    v.check_env({name: "" for name in options.secret_env}, f"{where}.secret_env")
    for name, ref in options.secret_env.items():
        secret, _, key = str(ref).partition("/")
        if not key or not _SECRET_KEY.match(key):
            raise KubeRaySpecError(f"{where}.secret_env[{name!r}] must be 'secret-name/key', got {ref!r}")
        v.check_name(secret, f"{where}.secret_env[{name!r}] Secret", "subdomain")
    for index, name in enumerate([*options.env_from_secrets, *options.image_pull_secrets]):
        v.check_name(name, f"{where} Secret name [{index}]", "subdomain")
    if options.priority_class_name is not None:
        v.check_name(options.priority_class_name, f"{where}.priority_class_name", "subdomain")
    names = set()
    for index, volume in enumerate(options.volumes):
        if not isinstance(volume, dict) or len(volume) < 2:
            raise KubeRaySpecError(f"{where}.volumes[{index}] must be a volume dict with a name and a source")
        v.check_name(volume.get("name"), f"{where}.volumes[{index}].name")
        names.add(volume["name"])
    for index, mount in enumerate(options.volume_mounts):
        if not isinstance(mount, dict) or mount.get("name") not in names or not mount.get("mountPath"):
            raise KubeRaySpecError(
                f"{where}.volume_mounts[{index}] needs a mountPath and a name among the volumes "
                f"{sorted(names)}"
            )
