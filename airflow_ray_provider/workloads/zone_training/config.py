"""The zone-training job configuration: parsing and validation (no Ray, no data access).

Keys (JSON or YAML mapping):

``application`` (str, required)
    Name recorded in the manifest; ``--only-failed`` refuses a manifest of another application.
``data_uri`` (str, required)
    Parquet file or directory (optionally hive-partitioned, e.g. ``zone=z1/part-0.parquet``);
    a local path, ``file://``, ``s3://`` or ``gs://``.
``zone_column`` / ``label_column`` (str, required)
    Column naming the zone, and the training target.
``feature_columns`` (list of str, optional)
    Default: every column except the zone and label columns.
``trainer`` (str, default ``"ridge"``) and ``trainer_kwargs`` (mapping)
    A built-in trainer name (see :mod:`.trainers`) or ``"module:function"``.
``num_cpus`` (number, default 1)
    CPU budget per zone: Ray CPUs per task and the OMP/MKL/OpenBLAS thread count inside it.
``max_retries`` (int, default 3)
    Ray retries of a task after a system failure (worker or node died).
``zone_retries`` (int, default 0)
    Extra attempts of a zone whose trainer raised.
``zone_timeout_s`` (number, optional)
    Per-zone time limit; see :mod:`.worker` for how it is enforced.
``max_failed_fraction`` (number in [0, 1], default 0.0)
    The job exits 1 when failed zones / all zones exceed it.
``output_uri`` (str, required)
    Where ``models/``, ``manifest.parquet``, ``summary.json`` and ``_SUCCESS`` go.
``batching`` (mapping)
    ``target_task_seconds`` (0.25), ``min_task_seconds`` (0.02), ``max_in_flight`` (default 3 x the
    CPU slots), ``max_zones_per_task`` (1000; 1 disables batching), ``probe_zones`` (2).
``progress_interval_s`` (number, default 5)
    Seconds between progress lines in the job log.
``run_info`` (mapping)
    Free-form (dag_id, run_id, ...), copied into ``summary.json``.
``ray_address`` (str, optional)
    Default: ``ray.init()`` joins the cluster the job runs in, or starts a local one standalone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.workloads.common.errors import ConfigError

_REQUIRED_STR = ("application", "data_uri", "zone_column", "label_column", "output_uri")
_BATCHING_KEYS = {
    "target_task_seconds",
    "min_task_seconds",
    "max_in_flight",
    "max_zones_per_task",
    "probe_zones",
}
_TOP_KEYS = {
    *_REQUIRED_STR,
    "feature_columns",
    "trainer",
    "trainer_kwargs",
    "num_cpus",
    "max_retries",
    "zone_retries",
    "zone_timeout_s",
    "max_failed_fraction",
    "batching",
    "progress_interval_s",
    "run_info",
    "ray_address",
}


@dataclass(frozen=True)
class BatchingConfig:
    """How zones are packed into Ray tasks.

    :param target_task_seconds: work per task to aim for once fit times are known.
    :param min_task_seconds: smallest task size, also near the end of the run.
    :param max_in_flight: tasks submitted and not yet collected (``None``: 3 x CPU slots).
    :param max_zones_per_task: upper bound on zones per task (1 = one task per zone).
    :param probe_zones: zones per task until the first fit times are measured.
    """

    target_task_seconds: float = 0.25
    min_task_seconds: float = 0.02
    max_in_flight: int | None = None
    max_zones_per_task: int = 1000
    probe_zones: int = 2


@dataclass(frozen=True)
class ZoneTrainingConfig:
    """A validated zone-training configuration (see the module docstring for each key)."""

    application: str
    data_uri: str
    zone_column: str
    label_column: str
    output_uri: str
    feature_columns: list[str] | None = None
    trainer: str = "ridge"
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    num_cpus: float = 1.0
    max_retries: int = 3
    zone_retries: int = 0
    zone_timeout_s: float | None = None
    max_failed_fraction: float = 0.0
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    progress_interval_s: float = 5.0
    run_info: dict[str, Any] = field(default_factory=dict)
    ray_address: str | None = None

    @property
    def threads(self) -> int:
        """Math-library threads per zone: the CPU budget, at least 1."""
        return max(1, int(self.num_cpus))


def parse_config(raw: dict[str, Any]) -> ZoneTrainingConfig:
    """Validate a raw mapping and build the config.

    :raises ConfigError: naming the first problem found and how to fix it.
    """
    if not isinstance(raw, dict):
        raise ConfigError(f"the zone-training config must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _TOP_KEYS)
    if unknown:
        raise ConfigError(f"unknown config key(s) {unknown}; valid keys: {sorted(_TOP_KEYS)}")
    for key in _REQUIRED_STR:
        _require_str(raw, key)
    return ZoneTrainingConfig(
        application=raw["application"],
        data_uri=raw["data_uri"],
        zone_column=raw["zone_column"],
        label_column=raw["label_column"],
        output_uri=raw["output_uri"],
        feature_columns=_feature_columns(raw),
        trainer=_optional_str(raw, "trainer") or "ridge",
        trainer_kwargs=_mapping(raw, "trainer_kwargs"),
        num_cpus=_number(raw, "num_cpus", 1.0, low=0.0, low_open=True),
        max_retries=_int(raw, "max_retries", 3),
        zone_retries=_int(raw, "zone_retries", 0),
        zone_timeout_s=_optional_number(raw, "zone_timeout_s"),
        max_failed_fraction=_number(raw, "max_failed_fraction", 0.0, low=0.0, high=1.0),
        batching=_batching(raw.get("batching")),
        progress_interval_s=_number(raw, "progress_interval_s", 5.0, low=0.0, low_open=True),
        run_info=_mapping(raw, "run_info"),
        ray_address=_optional_str(raw, "ray_address"),
    )


def _batching(raw: Any) -> BatchingConfig:
    if raw is None:
        return BatchingConfig()
    if not isinstance(raw, dict):
        raise ConfigError(f"'batching' must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - _BATCHING_KEYS)
    if unknown:
        raise ConfigError(f"unknown 'batching' key(s) {unknown}; valid keys: {sorted(_BATCHING_KEYS)}")
    target = _number(raw, "target_task_seconds", 0.25, low=0.0, low_open=True, where="batching.")
    min_s = _number(raw, "min_task_seconds", 0.02, low=0.0, where="batching.")
    if min_s > target:
        raise ConfigError("'batching.min_task_seconds' must not exceed 'batching.target_task_seconds'")
    in_flight = raw.get("max_in_flight")
    if in_flight is not None:
        in_flight = _int(raw, "max_in_flight", 0, low=1, where="batching.")
    return BatchingConfig(
        target_task_seconds=target,
        min_task_seconds=min_s,
        max_in_flight=in_flight,
        max_zones_per_task=_int(raw, "max_zones_per_task", 1000, low=1, where="batching."),
        probe_zones=_int(raw, "probe_zones", 2, low=1, where="batching."),
    )


def _require_str(raw: dict[str, Any], key: str) -> None:
    value = raw.get(key)
    if not isinstance(value, str) or not value.strip():
        got = "missing" if key not in raw else f"{value!r}"
        raise ConfigError(f"config key '{key}' must be a non-empty string (got {got})")


def _optional_str(raw: dict[str, Any], key: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"config key '{key}' must be a non-empty string, got {value!r}")
    return value


def _feature_columns(raw: dict[str, Any]) -> list[str] | None:
    value = raw.get("feature_columns")
    if value is None:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ConfigError(f"'feature_columns' must be a non-empty list of column names, got {value!r}")
    clash = {raw["zone_column"], raw["label_column"]} & set(value)
    if clash:
        raise ConfigError(f"'feature_columns' must not contain the zone or label column: {sorted(clash)}")
    return list(value)


def _mapping(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"config key '{key}' must be a mapping, got {type(value).__name__}")
    return dict(value)


def _number(
    raw: dict[str, Any],
    key: str,
    default: float,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    where: str = "",
) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"config key '{where}{key}' must be a number, got {value!r}")
    too_low = low is not None and (value <= low if low_open else value < low)
    if too_low or (high is not None and value > high):
        bounds = f"{'>' if low_open else '>='} {low}" + (f" and <= {high}" if high is not None else "")
        raise ConfigError(f"config key '{where}{key}' must be {bounds}, got {value!r}")
    return float(value)


def _optional_number(raw: dict[str, Any], key: str) -> float | None:
    if raw.get(key) is None:
        return None
    return _number(raw, key, 0.0, low=0.0, low_open=True)


def _int(raw: dict[str, Any], key: str, default: int, *, low: int = 0, where: str = "") -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ConfigError(f"config key '{where}{key}' must be an integer >= {low}, got {value!r}")
    return value
