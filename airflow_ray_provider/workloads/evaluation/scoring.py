"""Pluggable model loading and float64 scoring.

A model is either a joblib/pickle file (any URI ``pyarrow.fs`` reads: local, ``s3://``, ``gs://``) holding a
scikit-learn-style estimator, or a ``module:function`` factory returning such an object (the hook for
PyTorch, XGBoost, ... models: wrap them in an object with ``predict_proba`` or ``predict``). A factory
receives its ``kwargs`` from the config plus ``device`` (``"cuda"`` when the scoring actor holds a GPU,
``"cpu"`` otherwise) if its signature accepts it.

Scores are float64: scikit-learn keeps float32 input in float32, and float32 scores would make the
metrics depend on the input dtype.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_ray_provider.workloads.common.errors import ConfigError, DataError

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.evaluation.config import ModelSpec


@dataclass
class LoadedModel:
    """A loaded model and its identity (``sha256`` of the file; None for factories)."""

    name: str
    model: Any
    has_proba: bool
    sha256: str | None


def load_model(spec: ModelSpec, *, device: str = "cpu") -> LoadedModel:
    """Load one model from its spec.

    :raises ConfigError: when the file is missing/unreadable, the factory cannot be imported, or the object
        has neither ``predict_proba`` nor ``predict``.
    """
    if spec.uri:
        model, digest = _load_file(spec)
    else:
        model, digest = _call_factory(spec, device), None
    has_proba = callable(getattr(model, "predict_proba", None))
    if not has_proba and not callable(getattr(model, "predict", None)):
        raise ConfigError(
            f"model {spec.name!r} ({type(model).__name__}) has neither predict_proba nor predict: "
            "wrap it in an object with predict_proba(X) -> (n, 2) probabilities"
        )
    return LoadedModel(spec.name, model, has_proba, digest)


def _load_file(spec: ModelSpec) -> tuple[Any, str]:
    from airflow_ray_provider.workloads.common.artifacts import read_bytes
    from airflow_ray_provider.workloads.common.errors import ArtifactError

    assert spec.uri is not None
    try:
        raw = read_bytes(spec.uri)
    except ArtifactError as exc:
        raise ConfigError(
            f"model {spec.name!r}: cannot read {spec.uri!r} ({exc}); check models.{spec.name}.uri"
        ) from exc
    try:
        if spec.uri.endswith((".pkl", ".pickle")):
            model = pickle.loads(raw)
        else:
            import joblib

            model = joblib.load(io.BytesIO(raw))
    except Exception as exc:
        raise ConfigError(
            f"model {spec.name!r}: {spec.uri!r} is not a loadable joblib/pickle file "
            f"({type(exc).__name__}: {exc}); "
            "save it with joblib.dump(model, path) using the same library versions as the cluster"
        ) from exc
    return model, hashlib.sha256(raw).hexdigest()


def _call_factory(spec: ModelSpec, device: str) -> Any:
    assert spec.factory is not None
    module_name, func_name = spec.factory.split(":")
    try:
        func = getattr(importlib.import_module(module_name), func_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"model {spec.name!r}: cannot import factory {spec.factory!r} ({exc}); "
            "install the package in the job's runtime_env or fix models.<name>.factory"
        ) from exc
    kwargs = dict(spec.kwargs)
    params = inspect.signature(func).parameters
    if "device" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        kwargs.setdefault("device", device)
    try:
        return func(**kwargs)
    except Exception as exc:
        raise ConfigError(
            f"model {spec.name!r}: factory {spec.factory!r} failed: {type(exc).__name__}: {exc}"
        ) from exc


def check_model_for_metrics(loaded: LoadedModel, needs_proba: bool, metrics: tuple[str, ...]) -> None:
    """Refuse a model without ``predict_proba`` when a probability metric is requested."""
    if needs_proba and not loaded.has_proba:
        wanted = sorted({"accuracy", "log_loss", "calibration"}.intersection(metrics))
        raise ConfigError(
            f"model {loaded.name!r} has no predict_proba but metrics {wanted} need probabilities: "
            "give it predict_proba, or limit metrics to ['roc_auc', 'ndcg'] (they only need a ranking score)"
        )


def score(loaded: LoadedModel, features: np.ndarray, batch_size: int) -> np.ndarray:
    """Score rows in float64, ``batch_size`` rows per call; probability of class 1 when available.

    :raises DataError: on a wrong output shape or non-finite scores.
    """
    parts = []
    for start in range(0, len(features), batch_size):
        chunk = features[start : start + batch_size]
        if loaded.has_proba:
            out = np.asarray(loaded.model.predict_proba(chunk), dtype=np.float64)
            out = out[:, _positive_column(loaded, out)] if out.ndim == 2 else out
        else:
            out = np.asarray(loaded.model.predict(chunk), dtype=np.float64).reshape(-1)
        parts.append(out)
    result = np.concatenate(parts) if parts else np.zeros(0)
    if result.shape != (len(features),):
        raise DataError(f"model {loaded.name!r} returned {result.shape} scores for {len(features)} rows")
    if not np.isfinite(result).all():
        raise DataError(
            f"model {loaded.name!r} produced NaN/inf scores: check the features for missing values"
        )
    return result


def _positive_column(loaded: LoadedModel, proba: np.ndarray) -> int:
    classes = getattr(loaded.model, "classes_", None)
    if proba.shape[1] != 2:
        raise DataError(
            f"model {loaded.name!r} predict_proba returned {proba.shape[1]} columns: "
            "a binary classifier is needed"
        )
    if classes is not None and len(classes) == 2 and 1 in list(classes):
        return list(classes).index(1)
    return 1
