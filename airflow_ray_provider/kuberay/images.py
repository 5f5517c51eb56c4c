"""Which Ray image each pod runs, and its agreement with ``rayVersion``.

KubeRay trusts ``rayVersion`` (it gates features such as token auth on it) while the image decides what
actually runs: they must agree. An image tag that starts with a version (``2.52.0``, ``2.52.0-py311-gpu``)
is compared with the cluster's Ray version and a mismatch fails before creation; a tag without one
(``latest``, a custom build) cannot be checked and is logged. GPU worker groups on the default image get
the GPU build (``rayproject/ray:<version>-gpu``), as KubeRay's GPU samples do.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from airflow_ray_provider.kuberay.errors import KubeRaySpecError
from airflow_ray_provider.kuberay.spec import RayClusterSpec, default_ray_version

log = logging.getLogger(__name__)
DEFAULT_REPOSITORY = "rayproject/ray"
_TAG_VERSION = re.compile(r"^v?([0-9]+\.[0-9]+(?:\.[0-9]+)?)(?![0-9])")


@dataclass(frozen=True)
class Images:
    """The resolved Ray version and images.

    :param ray_version: the cluster's ``rayVersion``.
    :param head: the head's image (and the default of CPU worker groups).
    :param workers: one image per worker group, in order.
    """

    ray_version: str
    head: str
    workers: list[str]


def tag_version(image: str) -> str | None:
    """The Ray version an image's tag starts with (``2.52.0`` of ``rayproject/ray:2.52.0-gpu``), if any."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    tag = name.split(":", 1)[1] if ":" in name else ""
    match = _TAG_VERSION.match(tag)
    return match.group(1) if match else None


def _same(a: str, b: str) -> bool:
    def parts(text: str) -> tuple[int, ...]:
        numbers = tuple(int(x) for x in re.findall(r"[0-9]+", text)[:3])
        return numbers + (0,) * (3 - len(numbers))

    return parts(a) == parts(b)


def resolve(spec: RayClusterSpec, default_image: str | None) -> Images:
    """The Ray version and every pod's image; raises :class:`KubeRaySpecError` when a tag disagrees.

    :param default_image: the connection's ``default_image``.
    """
    cluster_image = spec.image or default_image
    where = "spec.image" if spec.image else "the connection's default_image"
    ray_version = spec.ray_version or (cluster_image and tag_version(cluster_image)) or default_ray_version()
    explicit = [(where, cluster_image)] if cluster_image else []
    explicit += [
        (f"spec.worker_groups[{i}].image", g.image) for i, g in enumerate(spec.worker_groups) if g.image
    ]
    for field, image in explicit:
        _check(field, str(image), ray_version)
    head = cluster_image or f"{DEFAULT_REPOSITORY}:{ray_version}"
    gpu = f"{DEFAULT_REPOSITORY}:{ray_version}-gpu"
    workers = [g.image or (gpu if g.gpu and not cluster_image else head) for g in spec.worker_groups]
    return Images(ray_version=ray_version, head=head, workers=workers)


def _check(field: str, image: str, ray_version: str) -> None:
    version = tag_version(image)
    if version is None:
        log.warning("%s %r has no Ray version in its tag; assuming it runs Ray %s", field, image, ray_version)
    elif not _same(version, ray_version):
        raise KubeRaySpecError(
            f"{field} {image!r} is Ray {version} but the cluster's ray_version is {ray_version}; KubeRay "
            f"gates features on rayVersion, so make them agree (set ray_version={version!r} or use a "
            f"{ray_version} image)"
        )
