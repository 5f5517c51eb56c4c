"""One model application of the per-zone training template: its data, trainer and cluster shape."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.exceptions import RayInvalidInputError

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


@dataclass(frozen=True)
class ZoneApplication:
    """One model application: its data, trainer and (optionally) its own cluster shape.

    :param name: application name (``[A-Za-z0-9_.-]``, unique in the DAG); also its artifact sub-folder.
    :param data_uri: training data (Parquet, optionally ``zone=...`` partitioned); templated.
    :param zone_column: column naming the zone.
    :param label_column: training target.
    :param feature_columns: model inputs (``None``: every other column).
    :param trainer: built-in trainer name (``ridge``, ...) or ``module:function``.
    :param trainer_kwargs: keyword arguments of the trainer.
    :param num_cpus: CPUs per zone.
    :param max_failed_fraction: failed-zone share the first job tolerates before failing (the failed
        zones are then retried once with ``--only-failed``).
    :param cluster_spec: this application's cluster spec (image, sizing); ``None``: the DAG's default.
    :param runtime_env: this application's Ray runtime environment (e.g. its own ``pip`` list).
    :param options: extra zone-training config keys (``batching``, ``zone_timeout_s``, ...).
    :param prepare_entrypoint: optional Ray job run on the application's cluster before training
        (e.g. data preparation); Jinja-templated.
    """

    name: str
    data_uri: str
    zone_column: str = "zone"
    label_column: str = "label"
    feature_columns: list[str] | None = None
    trainer: str = "ridge"
    trainer_kwargs: dict[str, Any] = field(default_factory=dict)
    num_cpus: float = 1.0
    max_failed_fraction: float = 0.5
    cluster_spec: dict[str, Any] | None = None
    runtime_env: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    prepare_entrypoint: list[str] | None = None

    def __post_init__(self) -> None:
        if not _NAME.match(self.name or ""):
            raise RayInvalidInputError(
                f"application name {self.name!r} must match {_NAME.pattern} (it names a folder and a job)"
            )
        if not 0.0 <= self.max_failed_fraction <= 1.0:
            raise RayInvalidInputError(
                f"application {self.name!r}: max_failed_fraction must be in [0, 1], "
                f"got {self.max_failed_fraction}"
            )
        self._check_training_config()

    def _check_training_config(self) -> None:
        """Check the workload config this application makes when the DAG is parsed, as the training
        job's driver will (the same rules; no data or cluster touched): a typo in a trainer name, a key
        of ``options`` or a number fails here, not in a Ray job on a cluster started for it. A
        ``module:function`` trainer is imported only by the job (its module may live on the cluster)."""
        from airflow_ray_provider.workloads.common.errors import ConfigError
        from airflow_ray_provider.workloads.zone_training.config import parse_config
        from airflow_ray_provider.workloads.zone_training.trainers import BUILTIN_TRAINERS

        try:
            parse_config(self.training_config("checked-when-the-dag-runs", {}))
        except ConfigError as exc:
            raise RayInvalidInputError(f"application {self.name!r}: {exc}") from exc
        if self.trainer not in BUILTIN_TRAINERS and ":" not in self.trainer:
            raise RayInvalidInputError(
                f"application {self.name!r}: unknown trainer {self.trainer!r}; use one of "
                f"{list(BUILTIN_TRAINERS)} or 'package.module:function'"
            )

    @classmethod
    def coerce(cls, value: ZoneApplication | dict[str, Any]) -> ZoneApplication:
        """Accept an application or its dict form."""
        if isinstance(value, ZoneApplication):
            return value
        if not isinstance(value, dict):
            raise RayInvalidInputError(f"an application must be a ZoneApplication or a dict, got {value!r}")
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise RayInvalidInputError(
                f"application has unknown keys {unknown}; known: {sorted(cls.__dataclass_fields__)}"
            )
        return cls(**value)

    def training_config(self, output_uri: str, run_info: dict[str, Any]) -> dict[str, Any]:
        """The ``workloads.zone_training`` config of this application."""
        config: dict[str, Any] = {
            "application": self.name,
            "data_uri": self.data_uri,
            "zone_column": self.zone_column,
            "label_column": self.label_column,
            "trainer": self.trainer,
            "trainer_kwargs": dict(self.trainer_kwargs),
            "num_cpus": self.num_cpus,
            "max_failed_fraction": self.max_failed_fraction,
            "output_uri": output_uri,
            "run_info": run_info,
        }
        if self.feature_columns is not None:
            config["feature_columns"] = list(self.feature_columns)
        config.update(self.options)
        return config
