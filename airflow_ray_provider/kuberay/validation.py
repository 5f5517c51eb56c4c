"""Field checks shared by the spec builder and the manifest path; each raises :class:`KubeRaySpecError`."""

from __future__ import annotations

import re
from typing import Any

from airflow_ray_provider.kuberay import controller_rules as rules
from airflow_ray_provider.kuberay.errors import KubeRaySpecError

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Kubernetes' quantity grammar without a sign: decimal SI, binary SI or a decimal exponent ("1e3").
_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?[0-9]+)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def check_dns_label(value: Any, where: str, max_len: int = 63) -> None:
    """A DNS-1123 label (namespaces, group names)."""
    if not isinstance(value, str) or len(value) > max_len or not _DNS1123_LABEL.match(value):
        raise KubeRaySpecError(
            f"{where} {value!r} is not a valid DNS-1123 label: use at most {max_len} lowercase letters, "
            "digits and '-', starting and ending with a letter or digit"
        )


def check_dns_subdomain(value: Any, where: str) -> None:
    """A DNS-1123 subdomain (service account names such as ``ray.jobs``)."""
    if not isinstance(value, str) or len(value) > 253 or not _DNS1123_SUBDOMAIN.match(value):
        raise KubeRaySpecError(
            f"{where} {value!r} is not a valid DNS-1123 subdomain: at most 253 lowercase letters, digits, "
            "'-' and '.', starting and ending with a letter or digit (e.g. 'ray-jobs' or 'ray.jobs')"
        )


def check_quantity(value: Any, where: str) -> None:
    """A Kubernetes resource quantity such as ``500m``, ``2`` or ``8Gi``."""
    if isinstance(value, bool) or not _QUANTITY.match(str(value)):
        raise KubeRaySpecError(f"{where} {value!r} is not a Kubernetes quantity (e.g. '500m', '2', '8Gi')")


def check_string_map(value: Any, where: str) -> None:
    """A dict of str to str (annotations, rayStartParams)."""
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


def check_labels(value: Any, where: str) -> None:
    """Kubernetes labels: qualified keys, values of <= 63 characters."""
    check_string_map(value, where)
    for key, item in value.items():
        if not _LABEL_KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
            raise KubeRaySpecError(f"{where} has an invalid label key {key!r}")
        if len(item) > 63 or not _LABEL_VALUE.match(item):
            raise KubeRaySpecError(f"{where}[{key!r}] value {item!r} is not a valid label value")


def check_pod_placement(node_selector: Any, tolerations: Any, where: str) -> None:
    """Node selector (label keys to values) and tolerations, by the rules pods must pass."""
    rules.check_node_selector(node_selector, f"{where}.node_selector")
    rules.check_tolerations(tolerations, f"{where}.tolerations")
