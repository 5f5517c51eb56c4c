"""Per-zone trainers: built-in scikit-learn ones and the ``module:function`` loader.

A trainer is any callable::

    def train(frame: pandas.DataFrame, *, label_column: str, feature_columns: list[str], **kwargs)
        -> tuple[model, dict[str, float]]

``frame`` holds one zone's rows: the zone column (a pandas ``Categorical`` holding the zone as a
string), the label and the feature columns, indexed from 0; ``kwargs`` are the config's
``trainer_kwargs``. It returns the fitted model (pickled into ``models/``) and a flat dict of metrics
(JSON-serialisable numbers; NaN/inf are stored as null).

**Array trainers** skip the per-zone DataFrame: a function decorated with :func:`array_trainer` is
called as::

    def train_arrays(X: numpy.ndarray, y: numpy.ndarray, *, feature_names: list[str], **kwargs)
        -> tuple[model, dict[str, float]]

with ``X`` the zone's feature columns as float64 (rows x features, nulls as NaN) and ``y`` its
labels (the label column's NumPy conversion). Any callable with a callable ``train_arrays``
attribute is treated the same way (the worker calls that attribute). Feature columns must then be
numeric (checked before training starts). The decorated function stays callable with a DataFrame.

Built-ins (``trainer_kwargs``: ``validation_fraction`` (0.2; 0 scores on the training rows), every
other key goes to the estimator): ``ridge``, ``hist_gradient_boosting`` (regression: rmse, mae, r2),
``logistic_regression``, ``hist_gradient_boosting_classifier`` (accuracy, log_loss, roc_auc when binary).
Every 1/``validation_fraction``-th row (evenly spaced, deterministic) is held out for the metrics.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_ray_provider.workloads.common.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

TrainerFn = Callable[..., tuple[Any, dict[str, Any]]]


class ArrayTrainer:
    """A trainer taking NumPy arrays, also callable with a DataFrame (the classic trainer signature).

    :param fn: ``fn(X, y, *, feature_names, **kwargs) -> (model, metrics)``.
    :param name: shown in logs and errors.
    """

    def __init__(self, fn: TrainerFn, name: str | None = None) -> None:
        self.train_arrays = fn
        self.__name__ = name or getattr(fn, "__name__", "array_trainer")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(
        self, frame: pd.DataFrame, *, label_column: str, feature_columns: list[str], **kwargs: Any
    ) -> tuple[Any, dict[str, Any]]:
        """Train on a DataFrame: its feature columns as float64 and its labels, then :attr:`train_arrays`."""
        import numpy as np

        x = frame[list(feature_columns)].to_numpy(dtype=np.float64)
        return self.train_arrays(
            x, frame[label_column].to_numpy(), feature_names=list(feature_columns), **kwargs
        )


def array_trainer(fn: TrainerFn) -> ArrayTrainer:
    """Declare that ``fn`` takes ``(X, y, *, feature_names, **kwargs)`` arrays instead of a DataFrame.

    :param fn: the array trainer function.
    """
    return ArrayTrainer(fn)


def array_entry(trainer: Any) -> TrainerFn | None:
    """The array entry point of ``trainer`` (its ``train_arrays``), or ``None`` for a DataFrame trainer."""
    fn = getattr(trainer, "train_arrays", None)
    return fn if callable(fn) else None


_ESTIMATORS = {
    "ridge": ("sklearn.linear_model", "Ridge", "regression"),
    "hist_gradient_boosting": ("sklearn.ensemble", "HistGradientBoostingRegressor", "regression"),
    "logistic_regression": ("sklearn.linear_model", "LogisticRegression", "classification"),
    "hist_gradient_boosting_classifier": (
        "sklearn.ensemble",
        "HistGradientBoostingClassifier",
        "classification",
    ),
}
BUILTIN_TRAINERS = tuple(_ESTIMATORS)


def load_trainer(spec: str) -> TrainerFn:
    """Resolve a trainer name or ``module:function`` to a callable.

    :raises ConfigError: unknown name, module not importable, attribute missing or not callable.
    """
    if spec in _ESTIMATORS:
        return _builtin(spec)
    if ":" not in spec:
        raise ConfigError(
            f"unknown trainer {spec!r}; use one of {list(BUILTIN_TRAINERS)} or 'package.module:function'"
        )
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise ConfigError(f"trainer {spec!r}: module {module_name!r} cannot be imported: {exc}") from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"trainer {spec!r}: {module_name!r} has no callable named {attr!r}")
    return fn


def check_trainer(spec: str, kwargs: Mapping[str, Any] | None = None) -> bool:
    """Validate a trainer spec (and a built-in's ``trainer_kwargs``) before training; return whether
    it takes arrays.

    A built-in name is known without importing scikit-learn (about a CPU-second of a short job's
    driver here, and the workers import it anyway); only estimator keywords in ``kwargs`` make it
    import its estimator, to check them (:func:`check_builtin_kwargs`). A ``module:function`` is
    imported; its keywords are its own business.

    :raises ConfigError: as :func:`load_trainer`, or a built-in's keyword that it would refuse.
    """
    if spec in _ESTIMATORS:
        check_builtin_kwargs(spec, kwargs or {})
        return True
    return array_entry(load_trainer(spec)) is not None


def check_builtin_kwargs(name: str, kwargs: Mapping[str, Any]) -> None:
    """Check a built-in trainer's ``trainer_kwargs`` as its estimator would, before any zone is fitted.

    ``validation_fraction`` must be a number in [0, 1); every other key must be a parameter of the
    estimator with a value its own parameter checks accept (scikit-learn's declared constraints:
    names, types and ranges; combinations it checks only in ``fit``, such as a solver that does not
    support a penalty, still fail per zone). A driver that cannot import scikit-learn skips this check.

    :raises ConfigError: naming ``trainer_kwargs``, the key and what the estimator accepts.
    """
    fraction = kwargs.get("validation_fraction", 0.2)
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 <= fraction < 1:
        raise ConfigError(
            f"trainer_kwargs.validation_fraction must be a number in [0, 1) (0: score on the training rows), "
            f"got {fraction!r}"
        )
    params = {key: value for key, value in kwargs.items() if key != "validation_fraction"}
    if not params:
        return
    module_name, cls_name, _ = _ESTIMATORS[name]
    try:
        estimator_cls = getattr(importlib.import_module(module_name), cls_name)
    except ImportError:  # a driver without scikit-learn: the workers (which need it) check the keywords
        return
    try:
        estimator = estimator_cls(**params)
    except TypeError as exc:
        known = sorted(estimator_cls().get_params())
        unknown = sorted(set(params) - set(known))
        if not unknown:
            raise ConfigError(f"trainer_kwargs (trainer {name!r}): {exc}") from exc
        raise ConfigError(
            f"trainer_kwargs: {unknown} not parameters of {cls_name} (trainer {name!r}); "
            f"use validation_fraction or any of {known}"
        ) from exc
    validate = getattr(estimator, "_validate_params", None)  # scikit-learn's own checks, as in fit()
    if callable(validate):
        try:
            validate()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"trainer_kwargs (trainer {name!r}): {exc}") from exc


def _builtin(name: str) -> TrainerFn:
    module_name, cls_name, task = _ESTIMATORS[name]
    estimator_cls = getattr(importlib.import_module(module_name), cls_name)  # import once, not per zone

    def train_arrays(
        x: np.ndarray, y: np.ndarray, *, feature_names: list[str], **kwargs: Any
    ) -> tuple[Any, dict[str, Any]]:
        fraction = float(kwargs.pop("validation_fraction", 0.2))
        return fit_and_score(estimator_cls(**kwargs), x, y, feature_names, task, fraction)

    return ArrayTrainer(train_arrays, name)


def fit_and_score(
    model: Any, x: np.ndarray, y: np.ndarray, features: list[str], task: str, validation_fraction: float
) -> tuple[Any, dict[str, Any]]:
    """Fit ``model`` on the non-held-out rows and score it on the held-out ones.

    :param x: features, rows x columns (float64).
    :param y: labels.
    """
    import numpy as np

    held = holdout_mask(len(x), validation_fraction)
    train = ~held if held.any() and (~held).any() else np.ones(len(x), dtype=bool)
    test = held if held.any() and (~held).any() else train
    model.fit(x[train], y[train])
    scorer = _regression_metrics if task == "regression" else _classification_metrics
    metrics = scorer(model, x[test], y[test])
    # Fitted on arrays for speed (DataFrame validation costs more than a small Ridge fit); record the
    # names so that predict() on a DataFrame with these columns is checked as usual.
    model.feature_names_in_ = np.asarray(features, dtype=object)
    metrics.update(train_rows=int(train.sum()), validation_rows=int(test.sum()) if held.any() else 0)
    return model, metrics


def holdout_mask(rows: int, fraction: float) -> np.ndarray:
    """Evenly spaced rows to hold out, about ``fraction`` of them (deterministic, no RNG)."""
    import numpy as np

    if fraction <= 0 or rows < 2:
        return np.zeros(rows, dtype=bool)
    idx = np.arange(rows)
    return np.floor((idx + 1) * fraction) > np.floor(idx * fraction)


def _regression_metrics(model: Any, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    import numpy as np

    y = y.astype(np.float64)
    err = model.predict(x).astype(np.float64) - y
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return {
        "rmse": float(np.sqrt((err**2).mean())),
        "mae": float(np.abs(err).mean()),
        "r2": 1.0 - float((err**2).sum()) / ss_tot if ss_tot > 0 else None,
    }


def _classification_metrics(model: Any, x: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    import numpy as np
    from sklearn.metrics import log_loss, roc_auc_score

    proba = model.predict_proba(x).astype(np.float64)
    classes = model.classes_
    metrics: dict[str, Any] = {"accuracy": float((classes[proba.argmax(axis=1)] == y).mean())}
    metrics["log_loss"] = float(log_loss(y, proba, labels=classes))
    binary = len(classes) == 2 and len(np.unique(y)) == 2
    metrics["roc_auc"] = float(roc_auc_score(y == classes[1], proba[:, 1])) if binary else None
    return metrics


def clean_metrics(metrics: Any) -> dict[str, Any]:
    """Check a trainer's metrics and make them JSON-safe (NaN/inf -> None, numpy scalars -> float).

    :raises TypeError: when ``metrics`` is not a mapping with string keys.
    """
    if not isinstance(metrics, dict) or not all(isinstance(k, str) for k in metrics):
        raise TypeError(f"trainer metrics must be a dict with str keys, got {type(metrics).__name__}")
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if hasattr(value, "item") and callable(value.item):
            value = value.item()
        if isinstance(value, float) and not math.isfinite(value):
            value = None
        out[key] = value
    return out
