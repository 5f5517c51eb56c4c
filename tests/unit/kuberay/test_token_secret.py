"""The token Secret is the one KubeRay names, and enableK8sTokenAuth is refused up front with the reason."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_ray_provider.kuberay import (
    KubeRaySpecError,
    RayClusterSpec,
    build_body,
    prepare_manifest,
    token_ref_of,
)

NAME_53 = "nightly-evaluation-of-the-champion-and-challenger-abc"


@pytest.mark.unit
def test_token_secret_of_a_53_character_name_is_truncated_like_kuberay():
    assert len(NAME_53) == 53
    body = build_body(RayClusterSpec(), name=NAME_53, namespace="ray")
    ref = token_ref_of(body)
    assert ref is not None and ref.secret_name == NAME_53[3:] and len(ref.secret_name) == 50
    assert not ref.provider_created
    body["spec"]["authOptions"]["secretName"] = "my-token"
    assert token_ref_of(body).secret_name == "my-token"  # type: ignore[union-attr]


@pytest.mark.unit
def test_enable_k8s_token_auth_is_refused_with_the_reason(kuberay_sample_manifest: dict[str, Any]):
    manifest = dict(kuberay_sample_manifest)
    manifest["spec"] = {
        **manifest["spec"],
        "rayVersion": "2.57.0",
        "authOptions": {"mode": "token", "enableK8sTokenAuth": True},
    }
    with pytest.raises(KubeRaySpecError, match="enableK8sTokenAuth: true is not supported") as err:
        prepare_manifest(manifest, name="k8s-auth", namespace="ray", labels={}, annotations={})
    assert "service-account tokens" in str(err.value) and "drop enableK8sTokenAuth" in str(err.value)
