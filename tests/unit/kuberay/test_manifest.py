"""The manifest path: one RayCluster out of a multi-document file, paths, per-run names, namespaces, and
every KubeRay ``ray-cluster.*.yaml`` sample accepted unchanged or refused with KubeRay's reason."""

from __future__ import annotations

import copy
import logging
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_ray_provider.kuberay import KubeRaySpecError, prepare_manifest
from airflow_ray_provider.kuberay.builder import load_manifest
from tests.fixtures.kuberay import REFUSED_SAMPLES as REFUSED
from tests.fixtures.kuberay import SAMPLE_FILES
from tests.fixtures.kuberay import SAMPLES_DIR as SAMPLES

CLUSTER = """apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: fixed-name
spec:
  headGroupSpec:
    rayStartParams: {}
    template:
      spec:
        containers: [{name: ray-head, image: "rayproject/ray:2.52.0"}]
"""
CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: code\ndata: {a: b}\n"


def _prepare(manifest: Any, **kw: Any) -> dict[str, Any]:
    args = {"name": "run-1a2b", "namespace": "ray", "labels": {"o": "p"}, "annotations": {}, **kw}
    return prepare_manifest(manifest, **args)


@pytest.mark.unit
def test_multi_document_file_gives_its_ray_cluster_and_names_the_ignored_documents(tmp_path, caplog):
    path = tmp_path / "cluster.yaml"
    path.write_text(f"{CONFIGMAP}---\n{CLUSTER}---\n")
    with caplog.at_level(logging.WARNING):
        body = _prepare(str(path))
    assert body["kind"] == "RayCluster" and body["metadata"]["name"] == "run-1a2b"
    assert "ignoring 1 other document(s): ConfigMap/code" in caplog.text and "kubectl apply" in caplog.text


@pytest.mark.unit
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"{CLUSTER}---\n{CLUSTER}", "2 RayCluster documents (RayCluster/fixed-name, RayCluster/fixed-name)"),
        (f"{CONFIGMAP}---\n{CONFIGMAP}", "no RayCluster document (found ConfigMap/code, ConfigMap/code)"),
        (CONFIGMAP, "manifest must have apiVersion 'ray.io/v1' and kind 'RayCluster'"),
        ("- a\n- b\n", "must be YAML mappings"),
    ],
)
def test_files_without_exactly_one_ray_cluster_are_refused(text, expected):
    with pytest.raises(KubeRaySpecError, match=re.escape(expected)):
        _prepare(text)


@pytest.mark.unit
def test_absolute_and_relative_paths_both_load(tmp_path, monkeypatch):
    (tmp_path / "manifests").mkdir()
    path = tmp_path / "manifests" / "cluster.yml"
    path.write_text(CLUSTER)
    assert load_manifest(str(path))["metadata"]["name"] == "fixed-name"
    monkeypatch.chdir(tmp_path)
    assert load_manifest("manifests/cluster.yml")["metadata"]["name"] == "fixed-name"
    with pytest.raises(KubeRaySpecError, match=re.escape(f"manifest file '{tmp_path}/nope.yaml' does not")):
        load_manifest("nope.yaml")


@pytest.mark.unit
def test_a_fixed_name_is_replaced_by_the_per_run_name_and_the_namespace_is_checked():
    body = _prepare(CLUSTER, name="ray-run-a")
    other = _prepare(CLUSTER, name="ray-run-b")
    assert body["metadata"]["name"] != other["metadata"]["name"]  # two runs never collide
    assert body["metadata"]["namespace"] == "ray"
    same = yaml.safe_load(CLUSTER)
    same["metadata"]["namespace"] = "ray"
    assert _prepare(same)["metadata"]["namespace"] == "ray"
    same["metadata"]["namespace"] = "prod"
    with pytest.raises(KubeRaySpecError, match=r"namespace 'prod' differs .* pass namespace='prod'"):
        _prepare(same)


def _ray_cluster(path: Path) -> dict[str, Any]:
    return next(d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "RayCluster")


@pytest.mark.unit
@pytest.mark.skipif(not SAMPLE_FILES, reason=f"KubeRay samples not found at {SAMPLES} (no ../shared)")
@pytest.mark.parametrize("sample", SAMPLE_FILES)
def test_every_kuberay_sample_is_accepted_unchanged_or_refused_with_the_reason(sample):
    path = SAMPLES / sample
    original = _ray_cluster(path)
    if sample in REFUSED:
        with pytest.raises(KubeRaySpecError, match=re.escape(REFUSED[sample])):
            _prepare(str(path))
        return
    body = _prepare(str(path))
    meta, expected = body.pop("metadata"), copy.deepcopy(original)
    expected_meta = expected.pop("metadata")
    assert body == expected  # apiVersion, kind, spec: exactly the sample's
    assert meta["labels"] == {**(expected_meta.get("labels") or {}), "o": "p"}
    assert {k: v for k, v in meta.items() if k not in ("name", "namespace", "labels", "annotations")} == {
        k: v for k, v in expected_meta.items() if k not in ("name", "namespace", "labels", "annotations")
    }
