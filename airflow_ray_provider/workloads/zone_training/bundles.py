"""Where a training task puts its models: one file per zone, or one bundle file per task.

``artifacts`` (config):

* ``per_zone``: ``models/<zone>.joblib`` each (the pickled model);
* ``bundled``: the task's models in one file ``models/part-<run>-<task>.joblib``, written atomically
  once the task's zones are fitted;
* ``auto`` (default): bundled, except models whose pickle exceeds :data:`AUTO_MAX_MODEL_BYTES`, which
  get their own file (a bundle is read whole to load one of its models).

A bundle is a pickle (protocol 5) of ``{"format": BUNDLE_FORMAT, "models": {zone: model pickle}}``:
each model is pickled on its own (a model that cannot be pickled fails its zone only, and loading one
zone unpickles only its model). The manifest records each zone's file (``artifact``) and, for a
bundle, its key in it (``artifact_key``); :mod:`.loading` reads both layouts.

Why bundle: on this machine creating a file costs 5-140 µs of CPU (more on a busy ext4 disk), a
noticeable share of a ~1 ms Ridge fit; one file per task pays it once per task.
"""

from __future__ import annotations

import pickle
from typing import Any

from airflow_ray_provider.workloads.zone_training.config import ARTIFACT_MODES
from airflow_ray_provider.workloads.zone_training.manifest import model_file_name
from airflow_ray_provider.workloads.zone_training.writes import ModelWriter

BUNDLE_FORMAT = "zone-model-bundle/1"
AUTO_MAX_MODEL_BYTES = 1 << 20
"""``auto``: models up to this pickled size go into the task's bundle, bigger ones into their own file."""
BUNDLE_FLUSH_BYTES = 64 << 20
"""A bundle is written (and a next one started) once its models reach this size."""


def bundle_bytes(models: dict[str, bytes]) -> bytes:
    """A bundle file's content for ``{zone: pickled model}``."""
    return pickle.dumps({"format": BUNDLE_FORMAT, "models": models}, protocol=5)


def bundle_models(data: bytes, uri: str) -> dict[str, bytes]:
    """``{zone: pickled model}`` of a bundle file's content.

    :raises ValueError: when ``data`` is not a zone-model bundle.
    """
    content = pickle.loads(data)
    if not isinstance(content, dict) or content.get("format") != BUNDLE_FORMAT:
        raise ValueError(f"{uri!r} is not a zone-model bundle ({BUNDLE_FORMAT})")
    models: dict[str, bytes] = content["models"]
    return models


class ModelSaver:
    """Saves one task's pickled models in the configured layout and fills their manifest rows.

    :param models_uri: the ``models/`` directory URI.
    :param mode: one of :data:`ARTIFACT_MODES`.
    :param bundle_prefix: file name of this task's bundle, without ``.joblib``.
    """

    def __init__(self, models_uri: str, mode: str, bundle_prefix: str) -> None:
        if mode not in ARTIFACT_MODES:
            raise ValueError(f"artifacts must be one of {list(ARTIFACT_MODES)}, got {mode!r}")
        self._writer = ModelWriter(models_uri)
        self._mode = mode
        self._prefix = bundle_prefix
        self._pending: dict[str, bytes] = {}
        self._rows: list[dict[str, Any]] = []
        self._size = 0
        self._parts = 0

    def save(self, row: dict[str, Any], data: bytes) -> None:
        """Save the pickled model of ``row["zone"]``; its ``artifact``/``artifact_key`` are set now or at
        :meth:`flush` (which turns the row into a failure when the bundle cannot be written).

        :raises ArtifactError: when a model's own file cannot be written.
        """
        zone = row["zone"]
        if self._mode == "per_zone" or (self._mode == "auto" and len(data) > AUTO_MAX_MODEL_BYTES):
            row["artifact"], row["artifact_key"] = self._writer.write(model_file_name(zone), data), None
            return
        self._pending[zone] = data
        self._rows.append(row)
        self._size += len(data)
        if self._size >= BUNDLE_FLUSH_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the pending models as one bundle (atomically) and point their rows at it."""
        if not self._pending:
            return
        name = f"{self._prefix}.joblib" if self._parts == 0 else f"{self._prefix}-{self._parts}.joblib"
        self._parts += 1
        pending, rows = self._pending, self._rows
        self._pending, self._rows, self._size = {}, [], 0
        try:
            uri = self._writer.write(name, bundle_bytes(pending))
        except Exception as exc:
            error = f"could not save the model bundle: {type(exc).__name__}: {exc}"[:2000]
            for row in rows:
                row.update(status="failed", error=error, metrics="{}", artifact=None, artifact_key=None)
            return
        for row in rows:
            row["artifact"], row["artifact_key"] = uri, row["zone"]
