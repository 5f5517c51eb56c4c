"""Validated configuration of the evaluation workload (``workloads.evaluate``).

Every problem is reported as a :class:`~airflow_ray_provider.workloads.common.errors.ConfigError` that
names the key and says how to fix it (the shared rules of
:mod:`~airflow_ray_provider.workloads.common.validation`), before any data is read or any Ray work starts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.common.validation import ConfigSection
from airflow_ray_provider.workloads.evaluation.names import (
    DEFAULT_METRICS,
    ENGINES,
    KNOWN_METRICS,
    PROBABILITY_METRICS,
    SCORE_METHODS,
)
from airflow_ray_provider.workloads.evaluation.packing import FIELDS as RESOURCE_FIELDS
from airflow_ray_provider.workloads.evaluation.packing import Resources


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
    """How to load one model: a joblib/pickle file URI, or a ``module:function`` factory.

    :param score_method: ``predict_proba``, ``decision_function`` or ``predict`` (``None``: the rule of
        :mod:`~.scoring`: ``predict_proba`` when the model has it, else ``predict``, never hard labels
        for ranking metrics).
    :param resources: what scoring this model reserves (``num_cpus``, ``num_gpus``, ``memory`` in bytes;
        0 where undeclared): models are packed into actor groups by it (:mod:`~.packing`).
    """

    name: str
    uri: str | None = None
    factory: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    score_method: str | None = None
    resources: Resources = field(default_factory=Resources)

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
    """The scoring actor pools: one per model group (:mod:`~.packing`); each actor scores whole blocks.

    :param concurrency: actors per group (or ``[min, max]``: ``max`` actors, fewer when the cluster
        cannot hold them all, never fewer than ``min`` or one).
    :param num_cpus: CPUs reserved per actor at least (a group whose models declare more reserves
        their sum; fractional is fine; leave room for the read tasks).
    :param num_gpus: GPUs per actor at least (factory models move themselves to ``cuda`` when given one).
    :param models_per_actor: most models one group (one actor) holds; 0: as many as fit one node.
    :param batch_size: rows per ``predict_proba`` call inside an actor.
    :param read_num_cpus: CPUs reserved per Parquet read task.
    :param block_rows: target rows per block (whole Parquet row groups of one file).
    :param object_store_mb: cap on the object-store memory the blocks read ahead may use (estimated
        at 8 bytes per value; 0: twice the largest pool's actors, whatever their size).
    """

    concurrency: int | tuple[int, int] = 2
    num_cpus: float = 0.5
    num_gpus: float = 0.0
    models_per_actor: int = 0
    batch_size: int = 65536
    read_num_cpus: float = 0.5
    block_rows: int = 262144
    object_store_mb: int = 1024


@dataclass(frozen=True)
class EvalConfig:
    """The whole evaluation job; build it with :meth:`from_dict`.

    :param engine: ``auto`` (default), ``ray`` or ``local``: see :mod:`~.engine`.
    :param local_max_rows: rows up to which ``auto`` scores in-process on a one-node cluster (``None``:
        the break-even computed from the cluster's CPUs).
    :param auc_memory_mb: the exact AUCs' scores the driver holds in memory at most (MiB); above it
        they go to a temp file and finalize reads them back in passes of about that size (0: always).
    :param spill_dir: where that temp file lives (``None``: ``TMPDIR`` or ``/tmp``; a disk, not tmpfs).
    """

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
    engine: str = "auto"
    local_max_rows: int | None = None
    auc_memory_mb: float = 64.0
    spill_dir: str | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EvalConfig:
        """Validate a config mapping (as loaded from JSON/YAML).

        :raises ConfigError: naming the first problem found and how to fix it.
        """
        top = ConfigSection.root(raw, "the evaluation config")
        top.reject_unknown(f.name for f in dataclasses.fields(cls))
        top.require(*_REQUIRED, hint="see the evaluation docs for an example")
        columns = _columns(top.section("columns", example=_COLUMNS_EXAMPLE))
        models = _models(raw["models"])
        cfg = cls(
            data_uri=top.required_str("data_uri", hint="a path or URI"),
            columns=columns,
            models=models,
            output_uri=top.required_str("output_uri", hint="a path or URI"),
            baseline=top.optional_str("baseline", hint="the production model's name") or "champion",
            metrics=_metrics(top),
            ndcg_k=_ks(raw.get("ndcg_k", [5, 10])),
            threshold=top.number("threshold", 0.5, low=0.0, high=1.0),
            bootstrap=_bootstrap(top.section("bootstrap", example=_BOOTSTRAP_EXAMPLE)),
            scoring=_scoring(top.section("scoring", example=_SCORING_EXAMPLE)),
            write_predictions=top.boolean("write_predictions", False),
            run_info=top.mapping("run_info"),
            ray_address=top.optional_str("ray_address", hint="host:port, ray://host:port, auto or local"),
            progress_interval_s=top.number("progress_interval_s", 5.0, low=0.1, high=3600.0),
            engine=_engine(top),
            local_max_rows=(
                top.integer("local_max_rows", 0, low=0) if top.raw.get("local_max_rows") is not None else None
            ),
            auc_memory_mb=top.number("auc_memory_mb", 64.0, low=0.0),
            spill_dir=top.optional_str("spill_dir", hint="a directory on a local disk"),
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


_REQUIRED = ("data_uri", "columns", "models", "output_uri")
_COLUMNS_EXAMPLE = "{label: clicked, group: request_id, slices: [zone]}"
_BOOTSTRAP_EXAMPLE = "{samples: 200, seed: 0, confidence: 0.95}"
_SCORING_EXAMPLE = "{concurrency: 2, num_cpus: 0.5, num_gpus: 0}"


def _engine(top: ConfigSection) -> str:
    value = top.raw.get("engine", "auto")
    if value not in ENGINES:
        raise ConfigError(
            f"config key 'engine' must be one of {list(ENGINES)}, got {value!r}: use auto (the default: "
            "in-process for small inputs on one node, Ray otherwise), ray, or local"
        )
    return str(value)


def _columns(cols: ConfigSection) -> ColumnsConfig:
    cols.reject_unknown({"label", "group", "slices", "features"})
    return ColumnsConfig(
        label=cols.required_str("label", hint="the name of the 0/1 label column"),
        group=cols.optional_str("group", hint="a column name, or null"),
        slices=cols.names("slices", single_ok=True) or (),
        features=cols.names("features", single_ok=True) or (),
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
        section = ConfigSection(spec, f"models.{name}")
        section.reject_unknown({"uri", "factory", "kwargs", "score_method", *RESOURCE_FIELDS})
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
        specs.append(
            ModelSpec(
                name=str(name),
                uri=section.optional_str("uri", hint="a .joblib/.pkl file") if uri else None,
                factory=factory or None,
                kwargs=section.mapping("kwargs"),
                score_method=_score_method(section, str(name)),
                resources=_resources(section, str(name)),
            )
        )
    if len(specs) < 2:
        raise ConfigError("'models' needs at least two models (a baseline and a challenger) to compare")
    return tuple(specs)


def _resources(section: ConfigSection, name: str) -> Resources:
    """``num_cpus``, ``num_gpus`` and ``memory`` (bytes) of one model: finite numbers >= 0."""
    values = []
    for key in RESOURCE_FIELDS:
        value = section.number(key, 0.0, low=0.0)
        if not math.isfinite(value):
            raise ConfigError(
                f"models.{name}.{key} must be a finite number >= 0, got {value!r}: what scoring the model "
                "reserves (memory in bytes), or leave it out"
            )
        values.append(value)
    return Resources(*values)


def _score_method(section: ConfigSection, name: str) -> str | None:
    method = section.optional_str("score_method", hint=" | ".join(SCORE_METHODS))
    if method is not None and method not in SCORE_METHODS:
        raise ConfigError(
            f"models.{name}.score_method must be one of {list(SCORE_METHODS)}, got {method!r}: "
            "predict_proba for probabilities (every metric), decision_function for a ranking score "
            "(roc_auc, ndcg), predict for the model's own predictions"
        )
    return method


def _metrics(top: ConfigSection) -> tuple[str, ...]:
    names = top.names("metrics", noun="metric names", single_ok=True)
    names = DEFAULT_METRICS if names is None else names
    unknown = sorted(set(names) - set(KNOWN_METRICS))
    if unknown or not names:
        raise ConfigError(f"unknown metric(s) {unknown or list(names)}; choose from {list(KNOWN_METRICS)}")
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


def _bootstrap(boot: ConfigSection) -> BootstrapConfig:
    boot.reject_unknown(f.name for f in dataclasses.fields(BootstrapConfig))
    return BootstrapConfig(
        samples=boot.integer("samples", 200, low=0),
        seed=boot.integer("seed", 0, low=0),
        confidence=boot.number("confidence", 0.95, low=0.5, high=0.9999),
        buckets=boot.integer("buckets", 1000, low=2),
    )


def _scoring(scoring: ConfigSection) -> ScoringConfig:
    scoring.reject_unknown(f.name for f in dataclasses.fields(ScoringConfig))
    concurrency = scoring.raw.get("concurrency", 2)
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
        num_cpus=scoring.number("num_cpus", 0.5, low=0.0, high=1024.0),
        num_gpus=scoring.number("num_gpus", 0.0, low=0.0, high=64.0),
        models_per_actor=scoring.integer("models_per_actor", 0, low=0),
        batch_size=scoring.integer("batch_size", 65536, low=1),
        read_num_cpus=scoring.number("read_num_cpus", 0.5, low=0.0, high=1024.0),
        block_rows=scoring.integer("block_rows", 262144, low=1),
        object_store_mb=scoring.integer("object_store_mb", 1024, low=0),
    )
