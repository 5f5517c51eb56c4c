"""What production Ray pods need beyond CPU and memory, typed: applied to every pod of the cluster.

Credentials from Secrets (never in plain text in the RayCluster), pod labels and annotations (cost
allocation, network policies), image pull secrets, a priority class, volumes and their mounts (PVCs,
``/dev/shm``). :class:`PodOptions` is the typed face; :func:`apply` writes it into a pod template.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.kuberay import validation as v
from airflow_ray_provider.kuberay.errors import KubeRaySpecError

_SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


@dataclass(frozen=True)
class PodOptions:
    """Options of every Ray pod (head and workers).

    :param labels: labels on every pod (``spec.labels`` stay on the RayCluster object).
    :param annotations: annotations on every pod.
    :param secret_env: environment variables read from Secrets: ``{"VAR": "secret-name/key"}``.
    :param env_from_secrets: Secrets whose every key becomes an environment variable (``envFrom``).
    :param image_pull_secrets: names of ``kubernetes.io/dockerconfigjson`` Secrets.
    :param priority_class_name: the pods' PriorityClass.
    :param volumes: Kubernetes volume dicts, e.g. ``{"name": "shm", "emptyDir": {"medium": "Memory"}}``.
    :param volume_mounts: mounts into every Ray container, e.g. ``{"name": "shm", "mountPath": "/dev/shm"}``.
    """

    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    secret_env: dict[str, str] = field(default_factory=dict)
    env_from_secrets: list[str] = field(default_factory=list)
    image_pull_secrets: list[str] = field(default_factory=list)
    priority_class_name: str | None = None
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_mounts: list[dict[str, Any]] = field(default_factory=list)


def validate(options: PodOptions, where: str = "spec.pods") -> None:
    """Check pod options; raises :class:`KubeRaySpecError` naming the field."""
    v.check_labels(options.labels, f"{where}.labels")
    v.check_string_map(options.annotations, f"{where}.annotations")
    v.check_env({name: "" for name in options.secret_env}, f"{where}.secret_env")
    for name, ref in options.secret_env.items():
        secret, _, key = str(ref).partition("/")
        if not key or not _SECRET_KEY.match(key):
            raise KubeRaySpecError(f"{where}.secret_env[{name!r}] must be 'secret-name/key', got {ref!r}")
        v.check_dns_subdomain(secret, f"{where}.secret_env[{name!r}] Secret")
    for index, name in enumerate([*options.env_from_secrets, *options.image_pull_secrets]):
        v.check_dns_subdomain(name, f"{where} Secret name [{index}]")
    if options.priority_class_name is not None:
        v.check_dns_subdomain(options.priority_class_name, f"{where}.priority_class_name")
    names = set()
    for index, volume in enumerate(options.volumes):
        if not isinstance(volume, dict) or len(volume) < 2:
            raise KubeRaySpecError(f"{where}.volumes[{index}] must be a volume dict with a name and a source")
        v.check_dns_label(volume.get("name"), f"{where}.volumes[{index}].name")
        names.add(volume["name"])
    for index, mount in enumerate(options.volume_mounts):
        if not isinstance(mount, dict) or mount.get("name") not in names or not mount.get("mountPath"):
            raise KubeRaySpecError(
                f"{where}.volume_mounts[{index}] needs a mountPath and a name among the volumes "
                f"{sorted(names)}"
            )


def apply(options: PodOptions, template: dict[str, Any]) -> dict[str, Any]:
    """Write the options into a pod template (``{"spec": {"containers": [...]}}``); returns it."""
    pod, containers = template["spec"], template["spec"]["containers"]
    meta = {k: dict(x) for k, x in (("labels", options.labels), ("annotations", options.annotations)) if x}
    if meta:
        template["metadata"] = meta
    if options.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in options.image_pull_secrets]
    if options.priority_class_name:
        pod["priorityClassName"] = options.priority_class_name
    if options.volumes:
        pod["volumes"] = copy.deepcopy(options.volumes)
    for container in containers:
        env = [
            {
                "name": n,
                "valueFrom": {"secretKeyRef": {"name": r.split("/", 1)[0], "key": r.split("/", 1)[1]}},
            }
            for n, r in sorted(options.secret_env.items())
        ]
        if env:
            container["env"] = [*container.get("env", []), *env]
        if options.env_from_secrets:
            container["envFrom"] = [{"secretRef": {"name": name}} for name in options.env_from_secrets]
        if options.volume_mounts:
            container["volumeMounts"] = copy.deepcopy(options.volume_mounts)
    return template
