"""Pluggable model loading and float64 scoring.

A model is either a joblib/pickle file (any URI ``pyarrow.fs`` reads: local, ``s3://``, ``gs://``) holding a
scikit-learn-style estimator, or a ``module:function`` factory returning such an object (the hook for
PyTorch, XGBoost, ... models: wrap them in an object with ``predict_proba`` or ``predict``). A factory
receives its ``kwargs`` from the config plus ``device`` (``"cuda"`` when the scoring actor holds a GPU,
``"cpu"`` otherwise) if its signature accepts it.

Which method scores a model is ``models.<name>.score_method``: ``predict_proba`` (probability of class
1; every metric), ``decision_function`` (a ranking score: ``roc_auc`` and ``ndcg`` only) or ``predict``.
Unset, ``predict_proba`` is used when the model has it, else ``predict``; a ``predict`` that returns hard
0/1 labels (a ``LinearSVC``) is then refused for ``roc_auc`` and ``ndcg`` (ties everywhere: the figure
would describe the threshold, not the ranking) unless ``score_method: predict`` asks for exactly that.

A model fitted on a DataFrame (scikit-learn's ``feature_names_in_``) is scored with those names, in its
own column order, so it never sees an unnamed or reordered matrix.

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
from airflow_ray_provider.workloads.evaluation.names import PROBABILITY_METRICS, RANKING_METRICS

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.evaluation.config import ModelSpec


@dataclass
class LoadedModel:
    """A loaded model, how it is scored, and its identity (``sha256`` of the file; None for factories).

    :param method: the method that scores it (``predict_proba``, ``decision_function`` or ``predict``).
    :param explicit: whether the config chose ``method`` (``score_method``) rather than the default rule.
    """

    name: str
    model: Any
    method: str
    sha256: str | None
    explicit: bool = False

    @property
    def has_proba(self) -> bool:
        """Whether the scores are probabilities of class 1 (``predict_proba``)."""
        return self.method == "predict_proba"


def load_model(spec: ModelSpec, *, device: str = "cpu") -> LoadedModel:
    """Load one model from its spec.

    :raises ConfigError: when the file is missing/unreadable, the factory cannot be imported, or the object
        has neither ``predict_proba`` nor ``predict``.
    """
    if spec.uri:
        model, digest = _load_file(spec)
    else:
        model, digest = _call_factory(spec, device), None
    return LoadedModel(spec.name, model, _score_method(spec, model), digest, spec.score_method is not None)


def _score_method(spec: ModelSpec, model: Any) -> str:
    """The configured ``score_method`` (checked to exist), else ``predict_proba`` or ``predict``."""
    if spec.score_method is not None:
        if not callable(getattr(model, spec.score_method, None)):
            raise ConfigError(
                f"models.{spec.name}.score_method is {spec.score_method!r}, but the model "
                f"({type(model).__name__}) has no such method: choose one it has, or leave it unset"
            )
        return spec.score_method
    for method in ("predict_proba", "predict"):
        if callable(getattr(model, method, None)):
            return method
    raise ConfigError(
        f"model {spec.name!r} ({type(model).__name__}) has neither predict_proba nor predict: "
        "wrap it in an object with predict_proba(X) -> (n, 2) probabilities"
    )


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


def check_model_for_metrics(loaded: LoadedModel, metrics: tuple[str, ...]) -> None:
    """Refuse a model not scored by ``predict_proba`` when a probability metric is requested."""
    wanted = sorted(PROBABILITY_METRICS.intersection(metrics))
    if wanted and not loaded.has_proba:
        why = (
            f"is scored with {loaded.method} (models.{loaded.name}.score_method)"
            if loaded.explicit
            else "has no predict_proba"
        )
        raise ConfigError(
            f"model {loaded.name!r} {why} but metrics {wanted} need probabilities: "
            "give it predict_proba, or limit metrics to ['roc_auc', 'ndcg'] (they only need a ranking score)"
        )


def check_scores_for_metrics(
    loaded: LoadedModel, sample_scores: np.ndarray, metrics: tuple[str, ...]
) -> None:
    """Refuse ranking metrics from hard 0/1 labels that ``predict`` gave by default, not on request.

    :param sample_scores: the model's scores of the preflight sample.
    """
    wanted = sorted(RANKING_METRICS.intersection(metrics))
    if loaded.method != "predict" or loaded.explicit or not wanted or len(sample_scores) == 0:
        return
    if not np.isin(sample_scores, (0.0, 1.0)).all():
        return
    if callable(getattr(loaded.model, "decision_function", None)):
        fix = f"set models.{loaded.name}.score_method: decision_function (its ranking score), or set"
    else:
        fix = "give it predict_proba or decision_function, or set"
    raise ConfigError(
        f"model {loaded.name!r} ({type(loaded.model).__name__}) has no predict_proba and its predict "
        f"returns hard 0/1 labels, so {wanted} would rank rows by the label alone (ties everywhere): "
        f"{fix} models.{loaded.name}.score_method: predict to score the labels anyway"
    )


def score(
    loaded: LoadedModel, features: np.ndarray, batch_size: int, names: tuple[str, ...] = ()
) -> np.ndarray:
    """Score rows in float64, ``batch_size`` rows per call, with the model's ``method``.

    :param names: the column name of each feature (``features``' columns, in order); a model that
        knows its feature names gets a DataFrame with its own columns in its own order.
    :raises DataError: on a wrong output shape, non-finite scores, or features the model lacks.
    """
    method = getattr(loaded.model, loaded.method)
    frame = _framer(loaded, names)
    parts = []
    for start in range(0, len(features), batch_size):
        chunk = features[start : start + batch_size]
        out = np.asarray(method(frame(chunk)), dtype=np.float64)
        if loaded.method == "predict_proba":
            out = out[:, _positive_column(loaded, out)] if out.ndim == 2 else out
        elif out.ndim == 2 and out.shape[1] == 1:
            out = out.reshape(-1)
        parts.append(out)
    result = np.concatenate(parts) if parts else np.zeros(0)
    if result.shape != (len(features),):
        raise DataError(f"model {loaded.name!r} returned {result.shape} scores for {len(features)} rows")
    if not np.isfinite(result).all():
        raise DataError(
            f"model {loaded.name!r} produced NaN/inf scores: check the features for missing values"
        )
    return result


def _framer(loaded: LoadedModel, names: tuple[str, ...]) -> Any:
    """``chunk -> model input``: the matrix itself, or a DataFrame in the model's own feature order."""
    known = getattr(loaded.model, "feature_names_in_", None)
    if known is None or not names:
        return lambda chunk: chunk
    known = [str(n) for n in known]
    missing = [n for n in known if n not in names]
    if missing:
        raise DataError(
            f"model {loaded.name!r} was fitted on features {missing} that columns.features does not "
            f"list (now {list(names)}): list every feature the model was trained on"
        )
    import pandas as pd

    order = [names.index(n) for n in known]
    same = order == list(range(len(names)))
    return lambda chunk: pd.DataFrame(chunk if same else chunk[:, order], columns=known, copy=False)


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
