"""Validated configuration of the evaluation workload (``workloads.evaluate``).

Every problem is reported as a :class:`~.errors.ConfigError` that names the key
and says how to fix it, before any data is read or any Ray work starts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.workloads.common.errors import ConfigError

KNOWN_METRICS = ("accuracy", "roc_auc", "log_loss", "calibration", "ndcg")
DEFAULT_METRICS = KNOWN_METRICS
#: Metrics that need a probability (``predict_proba``), not only a ranking score.
PROBABILITY_METRICS = frozenset({"accuracy", "log_loss", "calibration"})


@dataclass(frozen=True)
class ColumnsConfig:
    """Which columns of the log hold what.

    :param label: binary label (0/1), e.g. ``clicked``.
    :param group: query/request id (whole groups are resampled by the bootstrap; NDCG is per group).
    :param slices: columns to report metrics per value of (e.g. ``zone``); constant within a group.
    :param features: model inputs, in the order the models expect; empty: every other column.
    """

    label: str
    group: str | None = None
    slices: tuple[str, ...] = ()
    features: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelSpec:
    """How to load one model: a joblib/pickle file URI, or a ``module:function`` factory."""

    name: str
    uri: str | None = None
    factory: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def loader(self) -> str:
        """``"pickle"`` (joblib or pickle file) or ``"factory"``."""
        return "pickle" if self.uri else "factory"


@dataclass(frozen=True)
class BootstrapConfig:
    """Paired bootstrap of model-minus-baseline deltas (``samples=0`` turns it off)."""

    samples: int = 200
    seed: int = 0
    confidence: float = 0.95
    buckets: int = 1000


@dataclass(frozen=True)
class ScoringConfig:
    """The scoring actor pool: each actor loads every model once and scores whole blocks.

    :param concurrency: number of actors (or ``[min, max]`` for an autoscaling pool).
    :param num_cpus: CPUs reserved per actor (fractional is fine; leave room for the read tasks).
    :param num_gpus: GPUs per actor (factory models move themselves to ``cuda`` when given one).
    :param batch_size: rows per ``predict_proba`` call inside an actor.
    :param read_num_cpus: CPUs reserved per Parquet read task.
    :param block_rows: target rows per block (whole Parquet row groups of one file).
    :param object_store_mb: cap on the object-store memory the pipeline's blocks in flight may use
        (0: Ray Data's default, a fraction of the node's object store).
    """

    concurrency: int | tuple[int, int] = 2
    num_cpus: float = 0.5
    num_gpus: float = 0.0
    batch_size: int = 65536
    read_num_cpus: float = 0.5
    block_rows: int = 262144
    object_store_mb: int = 1024


@dataclass(frozen=True)
class EvalConfig:
    """The whole evaluation job; build it with :meth:`from_dict`."""

    data_uri: str
    columns: ColumnsConfig
    models: tuple[ModelSpec, ...]
    output_uri: str
    baseline: str = "champion"
    metrics: tuple[str, ...] = DEFAULT_METRICS
    ndcg_k: tuple[int, ...] = (5, 10)
    threshold: float = 0.5
    bootstrap: BootstrapConfig = BootstrapConfig()
    scoring: ScoringConfig = ScoringConfig()
    write_predictions: bool = False
    run_info: dict[str, Any] = field(default_factory=dict)
    ray_address: str | None = None
    progress_interval_s: float = 5.0

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EvalConfig:
        """Validate a config mapping (as loaded from JSON/YAML).

        :raises ConfigError: naming the first problem found and how to fix it.
        """
        if not isinstance(raw, dict):
            raise ConfigError(f"the config must be a mapping, got {type(raw).__name__}")
        _reject_unknown("config", raw, {f.name for f in dataclasses.fields(cls)})
        for key in ("data_uri", "columns", "models", "output_uri"):
            if key not in raw:
                raise ConfigError(f"config key {key!r} is required (see the evaluation docs for an example)")
        columns = _columns(raw["columns"])
        models = _models(raw["models"])
        cfg = cls(
            data_uri=_str(raw, "data_uri"),
            columns=columns,
            models=models,
            output_uri=_str(raw, "output_uri"),
            baseline=str(raw.get("baseline", "champion")),
            metrics=_metrics(raw.get("metrics", list(DEFAULT_METRICS))),
            ndcg_k=_ks(raw.get("ndcg_k", [5, 10])),
            threshold=_float(raw, "threshold", 0.5, 0.0, 1.0),
            bootstrap=_bootstrap(raw.get("bootstrap", {})),
            scoring=_scoring(raw.get("scoring", {})),
            write_predictions=_bool(raw, "write_predictions", False),
            run_info=_mapping(raw, "run_info"),
            ray_address=raw.get("ray_address") or None,
            progress_interval_s=_float(raw, "progress_interval_s", 5.0, 0.1, 3600.0),
        )
        cfg._check_consistency()
        return cfg

    @property
    def model_names(self) -> tuple[str, ...]:
        """Model names, baseline first."""
        rest = tuple(m.name for m in self.models if m.name != self.baseline)
        return (self.baseline, *rest)

    @property
    def needs_probabilities(self) -> bool:
        """Whether a requested metric needs ``predict_proba``."""
        return bool(PROBABILITY_METRICS.intersection(self.metrics))

    def _check_consistency(self) -> None:
        names = [m.name for m in self.models]
        if self.baseline not in names:
            raise ConfigError(
                f"baseline {self.baseline!r} is not one of the models {names}: "
                "set 'baseline' to the production model's name"
            )
        if "ndcg" in self.metrics and not self.columns.group:
            raise ConfigError(
                "metric 'ndcg' needs a query/request id: set columns.group, or drop 'ndcg' from metrics"
            )
        used = [
            self.columns.label,
            *([self.columns.group] if self.columns.group else []),
            *self.columns.slices,
        ]
        clash = sorted(set(used).intersection(self.columns.features))
        if clash:
            raise ConfigError(
                f"columns {clash} are listed as features and as label/group/slice: list them once"
            )
        if len(set(used)) != len(used):
            raise ConfigError(f"label, group and slice columns must be distinct, got {used}")


def _reject_unknown(where: str, raw: dict[str, Any], known: set[str]) -> None:
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in {where}; known keys: {sorted(known)} (typo?)")


def _str(raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"config key {key!r} must be a non-empty string (a path or URI), got {value!r}")
    return value


def _float(raw: dict[str, Any], key: str, default: float, low: float, high: float) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"{key!r} must be a number in [{low}, {high}], got {value!r}")
    return float(value)


def _bool(raw: dict[str, Any], key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{key!r} must be true or false, got {value!r}")
    return value


def _mapping(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        raise ConfigError(f"{key!r} must be a mapping, got {type(value).__name__}")
    return dict(value)


def _int(raw: dict[str, Any], key: str, default: int, low: int, where: str) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"{where}.{key} must be an integer >= {low}, got {value!r}")
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"{where} must be a list of column names, got {value!r}")
    return tuple(value)


def _columns(raw: Any) -> ColumnsConfig:
    if not isinstance(raw, dict):
        raise ConfigError(
            "'columns' must be a mapping like {label: clicked, group: request_id, slices: [zone]}"
        )
    _reject_unknown("columns", raw, {"label", "group", "slices", "features"})
    label = raw.get("label")
    if not isinstance(label, str) or not label:
        raise ConfigError("columns.label is required: the name of the 0/1 label column")
    group = raw.get("group")
    if group is not None and (not isinstance(group, str) or not group):
        raise ConfigError(f"columns.group must be a column name or null, got {group!r}")
    return ColumnsConfig(
        label=label,
        group=group,
        slices=_str_list(raw.get("slices"), "columns.slices"),
        features=_str_list(raw.get("features"), "columns.features"),
    )


def _models(raw: Any) -> tuple[ModelSpec, ...]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(
            "'models' must map names to specs, e.g. {champion: {uri: champ.joblib}, challenger: {uri: ...}}"
        )
    specs = []
    for name, spec in raw.items():
        if isinstance(spec, str):
            spec = {"factory": spec} if ":" in spec and "://" not in spec else {"uri": spec}
        if not isinstance(spec, dict):
            raise ConfigError(f"models.{name} must be a mapping with 'uri' or 'factory', got {spec!r}")
        _reject_unknown(f"models.{name}", spec, {"uri", "factory", "kwargs"})
        uri, factory = spec.get("uri"), spec.get("factory")
        if bool(uri) == bool(factory):
            raise ConfigError(
                f"models.{name} needs exactly one of 'uri' (a .joblib/.pkl file) "
                "or 'factory' ('module:function')"
            )
        if factory and (not isinstance(factory, str) or factory.count(":") != 1):
            raise ConfigError(
                f"models.{name}.factory must look like 'package.module:function', got {factory!r}"
            )
        kwargs = spec.get("kwargs") or {}
        if not isinstance(kwargs, dict):
            raise ConfigError(f"models.{name}.kwargs must be a mapping, got {kwargs!r}")
        specs.append(ModelSpec(name=str(name), uri=uri or None, factory=factory or None, kwargs=dict(kwargs)))
    if len(specs) < 2:
        raise ConfigError("'models' needs at least two models (a baseline and a challenger) to compare")
    return tuple(specs)


def _metrics(raw: Any) -> tuple[str, ...]:
    names = _str_list(raw, "metrics")
    unknown = sorted(set(names) - set(KNOWN_METRICS))
    if unknown or not names:
        raise ConfigError(f"unknown metric(s) {unknown or names}; choose from {list(KNOWN_METRICS)}")
    return tuple(dict.fromkeys(names))


def _ks(raw: Any) -> tuple[int, ...]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw]
    if (
        not isinstance(raw, (list, tuple))
        or not raw
        or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in raw)
    ):
        raise ConfigError(f"ndcg_k must be a list of positive integers like [5, 10], got {raw!r}")
    return tuple(sorted(set(raw)))


def _bootstrap(raw: Any) -> BootstrapConfig:
    if not isinstance(raw, dict):
        raise ConfigError("'bootstrap' must be a mapping like {samples: 200, seed: 0, confidence: 0.95}")
    _reject_unknown("bootstrap", raw, {f.name for f in dataclasses.fields(BootstrapConfig)})
    confidence = _float(raw, "confidence", 0.95, 0.5, 0.9999)
    return BootstrapConfig(
        samples=_int(raw, "samples", 200, 0, "bootstrap"),
        seed=_int(raw, "seed", 0, 0, "bootstrap"),
        confidence=confidence,
        buckets=_int(raw, "buckets", 1000, 2, "bootstrap"),
    )


def _scoring(raw: Any) -> ScoringConfig:
    if not isinstance(raw, dict):
        raise ConfigError("'scoring' must be a mapping like {concurrency: 2, num_cpus: 0.5, num_gpus: 0}")
    _reject_unknown("scoring", raw, {f.name for f in dataclasses.fields(ScoringConfig)})
    concurrency = raw.get("concurrency", 2)
    if isinstance(concurrency, list):
        concurrency = tuple(concurrency)
    valid_pair = (
        isinstance(concurrency, tuple)
        and len(concurrency) == 2
        and all(isinstance(c, int) and c >= 1 for c in concurrency)
        and concurrency[0] <= concurrency[1]
    )
    if not valid_pair and not (
        isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency >= 1
    ):
        raise ConfigError(f"scoring.concurrency must be an integer >= 1 or [min, max], got {concurrency!r}")
    return ScoringConfig(
        concurrency=concurrency,
        num_cpus=_float(raw, "num_cpus", 0.5, 0.0, 1024.0),
        num_gpus=_float(raw, "num_gpus", 0.0, 0.0, 64.0),
        batch_size=_int(raw, "batch_size", 65536, 1, "scoring"),
        read_num_cpus=_float(raw, "read_num_cpus", 0.5, 0.0, 1024.0),
        block_rows=_int(raw, "block_rows", 262144, 1, "scoring"),
        object_store_mb=_int(raw, "object_store_mb", 1024, 0, "scoring"),
    )
