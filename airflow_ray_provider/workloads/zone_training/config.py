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
    CPU budget per zone: Ray CPUs per task and the OMP/MKL/OpenBLAS thread count inside it. A budget
    no node can hold fails before any zone is trained (see :mod:`.capacity`).
``capacity_wait_s`` (number, default 300)
    On a cluster with an autoscaler: how long to wait for a node that holds ``num_cpus``.
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
``artifacts`` (``auto`` | ``bundled`` | ``per_zone``, default ``auto``)
    Model files: one bundle per task, one file per zone, or bundles for models up to 1 MiB pickled
    (see :mod:`.bundles`); load them with :func:`.loading.load_zone_model` in every layout.
``batching`` (mapping)
    ``target_task_seconds`` (0.25), ``min_task_seconds`` (0.02), ``max_in_flight`` (default 3 x the
    CPU slots), ``max_zones_per_task`` (1000; 1 disables batching), ``probe_zones`` (2).
``progress_interval_s`` (number, default 5)
    Seconds between progress lines in the job log.
``run_info`` (mapping)
    Free-form (dag_id, run_id, ...), copied into ``summary.json``.
``engine`` (``auto`` | ``ray`` | ``local``, default ``auto``)
    Who runs the zones: Ray tasks, or a pool of worker processes on this machine with the same
    batches, trainer code, artifacts and manifest (no Ray at all). ``auto`` runs a standalone
    command locally and always uses Ray inside a Ray job or on a cluster it connects to; see
    :mod:`.engine`.
``local_max_rows`` (int, optional)
    With ``engine: auto``: the largest input (rows) a standalone run trains locally (default: what
    a quarter of this machine's memory holds staged).
``ray_address`` (str, optional)
    Default: the cluster of the Ray job this runs in, or a private local Ray when run standalone; see
    :mod:`airflow_ray_provider.workloads.common.ray_session` for the whole rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.workloads.common.errors import ConfigError
from airflow_ray_provider.workloads.common.validation import ConfigSection

_REQUIRED_STR = {
    "application": "the model application's name",
    "data_uri": "a Parquet file or folder: path or URI",
    "zone_column": "the column naming the zone",
    "label_column": "the training target's column",
    "output_uri": "a folder: path or URI",
}
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
    "capacity_wait_s",
    "max_retries",
    "zone_retries",
    "zone_timeout_s",
    "max_failed_fraction",
    "batching",
    "progress_interval_s",
    "run_info",
    "ray_address",
    "artifacts",
    "engine",
    "local_max_rows",
}
ARTIFACT_MODES = ("auto", "bundled", "per_zone")
ENGINES = ("auto", "ray", "local")


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
    capacity_wait_s: float = 300.0
    max_retries: int = 3
    zone_retries: int = 0
    zone_timeout_s: float | None = None
    max_failed_fraction: float = 0.0
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    progress_interval_s: float = 5.0
    run_info: dict[str, Any] = field(default_factory=dict)
    ray_address: str | None = None
    artifacts: str = "auto"
    engine: str = "auto"
    local_max_rows: int | None = None

    @property
    def threads(self) -> int:
        """Math-library threads per zone: the CPU budget, at least 1."""
        return max(1, int(self.num_cpus))


def parse_config(raw: dict[str, Any]) -> ZoneTrainingConfig:
    """Validate a raw mapping and build the config.

    :raises ConfigError: naming the first problem found and how to fix it.
    """
    top = ConfigSection.root(raw, "the zone-training config")
    top.reject_unknown(_TOP_KEYS)
    application, data_uri, zone_column, label_column, output_uri = (
        top.required_str(key, hint=hint) for key, hint in _REQUIRED_STR.items()
    )
    return ZoneTrainingConfig(
        application=application,
        data_uri=data_uri,
        zone_column=zone_column,
        label_column=label_column,
        output_uri=output_uri,
        feature_columns=_feature_columns(top, zone_column, label_column),
        trainer=top.optional_str("trainer", hint="a built-in trainer or 'module:function'") or "ridge",
        trainer_kwargs=top.mapping("trainer_kwargs"),
        num_cpus=top.number("num_cpus", 1.0, low=0.0, low_open=True),
        capacity_wait_s=top.number("capacity_wait_s", 300.0, low=0.0),
        max_retries=top.integer("max_retries", 3),
        zone_retries=top.integer("zone_retries", 0),
        zone_timeout_s=top.optional_number("zone_timeout_s", low=0.0, low_open=True),
        max_failed_fraction=top.number("max_failed_fraction", 0.0, low=0.0, high=1.0),
        batching=_batching(top.section("batching")),
        progress_interval_s=top.number("progress_interval_s", 5.0, low=0.0, low_open=True),
        run_info=top.mapping("run_info"),
        ray_address=top.optional_str("ray_address", hint="host:port, ray://host:port, auto or local"),
        artifacts=_artifacts(top),
        engine=_engine(top),
        local_max_rows=_local_max_rows(top),
    )


def _artifacts(top: ConfigSection) -> str:
    mode = top.optional_str("artifacts", hint=" | ".join(ARTIFACT_MODES)) or "auto"
    if mode not in ARTIFACT_MODES:
        raise ConfigError(
            f"'artifacts' must be one of {list(ARTIFACT_MODES)}, got {mode!r}: 'bundled' writes one "
            "model file per task, 'per_zone' one per zone, 'auto' bundles models up to 1 MiB"
        )
    return mode


def _engine(top: ConfigSection) -> str:
    engine = top.raw.get("engine", "auto")
    if engine not in ENGINES:
        raise ConfigError(
            f"config key 'engine' must be one of {list(ENGINES)}, got {engine!r}: use auto (the default: "
            "worker processes on this machine for a standalone run, Ray inside a Ray job), ray or local"
        )
    return str(engine)


def _local_max_rows(top: ConfigSection) -> int | None:
    if top.raw.get("local_max_rows") is None:
        return None
    return top.integer("local_max_rows", 0, low=0)


def _batching(batching: ConfigSection) -> BatchingConfig:
    batching.reject_unknown(_BATCHING_KEYS)
    target = batching.number("target_task_seconds", 0.25, low=0.0, low_open=True)
    min_s = batching.number("min_task_seconds", 0.02, low=0.0)
    if min_s > target:
        raise ConfigError("'batching.min_task_seconds' must not exceed 'batching.target_task_seconds'")
    in_flight = batching.raw.get("max_in_flight")
    return BatchingConfig(
        target_task_seconds=target,
        min_task_seconds=min_s,
        max_in_flight=None if in_flight is None else batching.integer("max_in_flight", 0, low=1),
        max_zones_per_task=batching.integer("max_zones_per_task", 1000, low=1),
        probe_zones=batching.integer("probe_zones", 2, low=1),
    )


def _feature_columns(top: ConfigSection, zone_column: str, label_column: str) -> list[str] | None:
    names = top.names("feature_columns", non_empty=True)
    if names is None:
        return None
    clash = {zone_column, label_column} & set(names)
    if clash:
        raise ConfigError(f"'feature_columns' must not contain the zone or label column: {sorted(clash)}")
    return list(names)
