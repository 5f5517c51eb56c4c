"""Per-block work of the evaluation: score every model once and reduce the block to exact partials.

Runs in the scoring actors (one actor pool per model group, one call per block, so a block's rows
arrive in file order) or in this process; a block's partials from every group are merged into one
(:func:`merge_partials`) before the driver adds it. Groups are assumed to be stored contiguously (as
a request log is written); a group touching the first or last row of a block may continue in another
block, so its rows travel to the driver as a *fragment* and are completed there. The driver checks
that no group was seen complete twice (see :mod:`~airflow_ray_provider.workloads.evaluation.aggregate`).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NotRequired, TypedDict, cast

import numpy as np

from airflow_ray_provider.workloads.common.errors import DataError
from airflow_ray_provider.workloads.evaluation import bootstrap, metrics, ranking

if TYPE_CHECKING:
    import pyarrow as pa

    from airflow_ray_provider.workloads.evaluation.config import EvalConfig
    from airflow_ray_provider.workloads.evaluation.scoring import LoadedModel

log = logging.getLogger(__name__)
ALL = "__all__"


class BlockPartial(TypedDict):
    """What one block reduces to (merged on the driver by :class:`.aggregate.Accumulator`).

    :param slices: per slice column (and :data:`ALL`): ``values``, per-model integer ``stats``, and
        for AUC the per-(value, label) ``counts`` with the ``scores`` ordered by (value, label) and
        ascending within each.
    :param buckets: per model, integer statistics per bootstrap bucket.
    :param hist: per model, ``(keys, counts)`` of the bootstrap's AUC score histogram.
    :param complete_gkeys: hashes of the groups complete inside the block (``None``: no group column).
    :param fragments: the rows of the groups touching the block's first or last row (``None``: no groups).
    :param span: wall-clock ``(start, end)`` of the work (set by the Ray actor, for throughput).
    """

    rows: int
    slices: dict[str, dict[str, Any]]
    buckets: dict[str, dict[str, np.ndarray]]
    hist: dict[str, tuple[np.ndarray, np.ndarray]]
    complete_gkeys: np.ndarray | None
    fragments: dict[str, Any] | None
    span: NotRequired[tuple[float, float]]


def block_partial(
    *,
    rows: int,
    slices: dict[str, dict[str, Any]],
    buckets: dict[str, dict[str, np.ndarray]],
    hist: dict[str, tuple[np.ndarray, np.ndarray]],
) -> BlockPartial:
    """The one way a block's partial is made (group keys and fragments are filled in by the group pass)."""
    return BlockPartial(
        rows=rows, slices=slices, buckets=buckets, hist=hist, complete_gkeys=None, fragments=None
    )


def labels_of(table: pa.Table, column: str) -> np.ndarray:
    """The label column as int8 0/1.

    :raises DataError: on nulls or values other than 0/1.
    """
    col = table.column(column)
    if col.null_count:
        raise DataError(f"label column {column!r} has {col.null_count} null values: drop or fill them")
    y = np.asarray(col.to_numpy(zero_copy_only=False))
    if y.dtype.kind not in "biuf" or not np.isin(y, (0, 1)).all():
        bad = np.unique(y[~np.isin(y, (0, 1))])[:5] if y.dtype.kind in "biuf" else y[:5]
        raise DataError(
            f"label column {column!r} must hold 0/1 for binary metrics; found values such as {list(bad)}: "
            "binarise the label (e.g. clicked = clicks > 0) or point columns.label at the right column"
        )
    return y.astype(np.int8)


#: Rows transposed at a time by :func:`features_of` (a slab of every column stays in the cache).
TRANSPOSE_ROWS = 8192


def features_of(table: pa.Table, names: tuple[str, ...]) -> np.ndarray:
    """Feature matrix in float64, C order.

    Filled :data:`TRANSPOSE_ROWS` rows at a time (3x faster than ``np.column_stack`` at 262k x 16).
    """
    cols = [np.asarray(table.column(n).to_numpy(zero_copy_only=False), dtype=np.float64) for n in names]
    out = np.empty((table.num_rows, len(cols)))
    for start in range(0, table.num_rows if cols else 0, TRANSPOSE_ROWS):
        out[start : start + TRANSPOSE_ROWS] = np.stack([c[start : start + TRANSPOSE_ROWS] for c in cols]).T
    return out


def slice_codes(table: pa.Table, columns: tuple[str, ...]) -> dict[str, tuple[list[Any], np.ndarray]]:
    """Per slice column: its distinct values in this block and the int code of each row (plus the overall)."""
    out: dict[str, tuple[list[Any], np.ndarray]] = {ALL: (["all"], np.zeros(table.num_rows, dtype=np.int64))}
    for name in columns:
        encoded = table.column(name).combine_chunks().dictionary_encode()
        codes = encoded.indices.to_numpy(zero_copy_only=False)
        if encoded.null_count:
            codes = np.where(np.isnan(codes.astype(np.float64)), len(encoded.dictionary), codes)
            values = [*encoded.dictionary.to_pylist(), None]
        else:
            values = encoded.dictionary.to_pylist()
        out[name] = (values, codes.astype(np.int64))
    return out


def group_partial(
    starts: np.ndarray,
    y: np.ndarray,
    scores: dict[str, np.ndarray],
    codes: dict[str, tuple[list[Any], np.ndarray]],
    buckets: np.ndarray,
    cfg: EvalConfig,
    ascending: Mapping[str, np.ndarray] | None = None,
) -> tuple[dict[str, dict[str, dict[str, np.ndarray]]], dict[str, dict[str, np.ndarray]]]:
    """Group counts and NDCG sums per slice value and per bootstrap bucket, for whole groups.

    :param starts: start row of each group (rows of a group are consecutive).
    :param ascending: per model, its rows in ascending score order (``None``: sorted here).
    :raises DataError: when a slice column varies inside a group.
    """
    sizes = np.diff(np.append(starts, len(y)))
    for col, (_, row_codes) in codes.items():
        if col != ALL and len(starts) and (row_codes != np.repeat(row_codes[starts], sizes)).any():
            raise DataError(
                f"slice column {col!r} changes inside a group of {cfg.columns.group!r}: slice columns must "
                "be "
                "attributes of the whole request (e.g. zone, device); remove it from columns.slices"
            )
    ndcg = {
        m: ranking.ndcg_per_group(starts, y, s, cfg.ndcg_k, (ascending or {}).get(m))
        for m, s in scores.items()
    }
    per_slice: dict[str, dict[str, dict[str, np.ndarray]]] = {}
    for col, (values, row_codes) in codes.items():
        per_slice[col] = {m: _group_sums(row_codes[starts], len(values), ndcg[m]) for m in scores}
    per_bucket = (  # only the paired bootstrap reads them
        {m: _group_sums(buckets[starts], cfg.bootstrap.buckets, ndcg[m]) for m in scores}
        if cfg.bootstrap.samples
        else {}
    )
    return per_slice, per_bucket


def _group_sums(codes: np.ndarray, n_codes: int, ndcg: dict[int, np.ndarray]) -> dict[str, np.ndarray]:
    out = {"groups": metrics.grouped_int_sum(codes, None, n_codes)}
    for k, values in ndcg.items():
        hi, lo = metrics.fixed_limbs(values, metrics.RANGE_BITS["ndcg"])
        out[f"ndcg@{k}_hi"] = metrics.grouped_int_sum(codes, hi, n_codes)
        out[f"ndcg@{k}_lo"] = metrics.grouped_int_sum(codes, lo, n_codes)
    return out


def _key_dtype(n_keys: int) -> type[np.integer[Any]]:
    """The smallest sort key type for ``n_keys`` distinct keys (16 bits: numpy sorts them by radix)."""
    return np.uint16 if n_keys <= np.iinfo(np.uint16).max + 1 else np.int64


def _slot_sorted(key: np.ndarray, scores: np.ndarray, ascending: np.ndarray) -> np.ndarray:
    """``scores`` ordered by ``key``, ascending within each key (so finalize merges sorted runs).

    :param ascending: ``np.argsort(scores)``; a stable sort of the keys follows (radix for 16 bits).
    """
    return scores[ascending[np.argsort(key[ascending], kind="stable")]]


def _inner_order(ascending: np.ndarray, low: int, high: int) -> np.ndarray:
    """The ascending order of rows ``[low, high)`` alone (as indices from ``low``), from the block's."""
    return ascending[(ascending >= low) & (ascending < high)] - low


def _warm_imports() -> None:
    """Import :data:`WARM_MODULES` (those installed), so the first block does not pay for them."""
    import importlib

    for name in WARM_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


@contextlib.contextmanager
def native_threads(limit: int | None) -> Iterator[None]:
    """Cap the native thread pools (BLAS, OpenMP) of this process at ``limit`` (``None``: leave them).

    The blocks are the parallelism: two block threads each calling a two-thread BLAS run 2x slower
    on a 2-core machine (the pools spin for cores the other block holds); one thread gives the same
    bits. ``threadpoolctl`` comes with scikit-learn; without it nothing is capped.
    """
    if limit is None:
        yield
        return
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        yield
        return
    with threadpool_limits(limits=limit):
        yield


def _cap_native_threads(limit: int | None) -> None:
    """Cap BLAS and OpenMP at ``limit`` threads in this process from now on (``threadpoolctl``, which
    comes with scikit-learn; without it, or with ``limit`` ``None``, nothing is capped)."""
    if limit is None:
        return
    with contextlib.suppress(ImportError):
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=limit)  # called, not entered: the limits stay


def _resolve_model(cfg: EvalConfig, name: str, given: Any, device: str) -> LoadedModel:
    """The model ``name``: ``given`` itself, the object behind a Ray object ref, or loaded from its spec."""
    from airflow_ray_provider.workloads.evaluation.scoring import LoadedModel, load_model

    if isinstance(given, LoadedModel):
        return given
    if given is not None:  # a Ray ObjectRef (only the Ray engine passes these)
        import ray

        return cast("LoadedModel", ray.get(given))
    spec = next(m for m in cfg.models if m.name == name)
    return load_model(spec, device=device)


def merge_partials(parts: Sequence[BlockPartial]) -> BlockPartial:
    """One block's partials from every model group (same rows, disjoint models) as one partial.

    Everything but the per-model entries is computed from the block alone (labels, slices, group keys,
    bootstrap buckets), so each group's copy is the same and the first one's is kept.
    """
    first = parts[0]
    if len(parts) == 1:
        return first
    slices = {col: {**part, "stats": {}, "scores": {}} for col, part in first["slices"].items()}
    merged = block_partial(rows=first["rows"], slices=slices, buckets={}, hist={})
    for part in parts:
        for col, by_model in part["slices"].items():
            slices[col]["stats"].update(by_model["stats"])
            slices[col]["scores"].update(by_model["scores"])
        merged["buckets"].update(part["buckets"])
        merged["hist"].update(part["hist"])
    merged["complete_gkeys"] = first["complete_gkeys"]
    if first["fragments"] is not None:
        scores = {m: s for part in parts for m, s in (part["fragments"] or {}).get("scores", {}).items()}
        merged["fragments"] = {**first["fragments"], "scores": scores}
    spans = [part["span"] for part in parts if "span" in part]
    if spans:
        merged["span"] = (min(s[0] for s in spans), max(s[1] for s in spans))
    return merged


def add_stats(into: dict[str, np.ndarray], more: dict[str, np.ndarray]) -> None:
    """Add statistics arrays of the same codes, key by key."""
    for key, value in more.items():
        into[key] = into[key] + value if key in into else value


#: Modules a scoring actor imports in its constructor, while preflight still runs (each if installed).
WARM_MODULES = ("pyarrow", "pyarrow.compute", "pandas", "joblib", "sklearn.base")


@dataclass(frozen=True)
class Setup:
    """What a scoring actor needs from preflight: features, which models yield probabilities, the models.

    :param models: by name, the objects themselves (in-process) or Ray object refs to them (put once).
    """

    features: tuple[str, ...]
    has_proba: dict[str, bool]
    models: Mapping[str, Any] = field(default_factory=dict)


class BlockEvaluator:
    """Scores one model group: gets its models once, then turns each block into one partial.

    Used in this process (the in-process engine) and as a Ray actor class (one pool per group). An actor
    is created before preflight ends (``features=None``): its constructor imports :data:`WARM_MODULES`,
    and :meth:`prepare` (called once preflight is done, and again by :meth:`score_block` in an actor
    restarted after a node loss) takes the rest.

    :param cfg: the validated config; :param features: resolved feature columns (``None``: later, from
        :meth:`prepare`); :param has_proba: per model, whether it yields probabilities;
        :param predictions_uri: where to write per-block prediction files (None: do not write).
    :param models: models already loaded by the driver's preflight, by name: the objects themselves
        (in-process engine) or Ray object refs to them (shipped once through the object store). A
        model missing here is loaded from its spec (factories on a GPU actor, unpicklable objects).
    :param names: the group's models (``None``: every model of the config), baseline first.
    :param device: ``cuda`` when this actor holds a GPU (factories loaded here get it), else ``cpu``.
    :param native_threads: an actor's CPUs: BLAS and OpenMP are capped at this many threads for the
        actor's life (``None``: left as they are; the in-process engine caps them around its blocks).
    """

    def __init__(
        self,
        cfg: EvalConfig,
        features: tuple[str, ...] | None,
        has_proba: dict[str, bool] | None,
        predictions_uri: str | None,
        models: Mapping[str, Any] | None = None,
        names: Sequence[str] | None = None,
        device: str = "cpu",
        native_threads: int | None = None,
    ) -> None:
        self.cfg, self.predictions_uri, self.device = cfg, predictions_uri, device
        self.wanted = cfg.model_names if names is None else [n for n in cfg.model_names if n in set(names)]
        self.features: tuple[str, ...] = ()
        self.has_proba: dict[str, bool] = {}
        self.models: dict[str, LoadedModel] = {}
        self.ready = False
        self.warm_up = features is None or has_proba is None  # an actor started before preflight ended
        if features is None or has_proba is None:
            _warm_imports()
            _cap_native_threads(native_threads)
        else:
            self.prepare(Setup(features, has_proba, models or {}))

    def prepare(self, setup: Setup) -> None:
        """Take preflight's findings and get the group's models (once; later calls do nothing).

        An actor then scores one row of zeros with each model (the result is dropped): the first call of
        a model's method imports and sets up what it needs, now rather than in the first block.
        """
        if self.ready:
            return
        self.features, self.has_proba = setup.features, setup.has_proba
        self.models = {n: _resolve_model(self.cfg, n, setup.models.get(n), self.device) for n in self.wanted}
        self.ready = True
        if self.warm_up:
            from airflow_ray_provider.workloads.evaluation.scoring import score

            for loaded in self.models.values():
                with contextlib.suppress(Exception):  # a real block reports a model's errors
                    score(loaded, np.zeros((1, len(self.features))), 1, self.features)

    def score_block(self, table: pa.Table, setup: Setup) -> BlockPartial:
        """:meth:`evaluate` with the wall-clock span of the work (the Ray actor's method).

        :param setup: what :meth:`prepare` takes (a restarted actor has not had it).
        """
        import time

        self.prepare(setup)
        started = time.time()
        partial = self.evaluate(table)
        partial["span"] = (started, time.time())  # wall clock of the work, for throughput figures
        return partial

    def evaluate(self, table: pa.Table) -> BlockPartial:
        """The partial aggregate of one block (merged by :class:`.aggregate.Accumulator`)."""
        from airflow_ray_provider.workloads.evaluation.scoring import score

        cfg = self.cfg
        y = labels_of(table, cfg.columns.label)
        x = features_of(table, self.features)
        scores = {}
        for name, loaded in self.models.items():
            try:
                scores[name] = score(loaded, x, cfg.scoring.batch_size, self.features)
            except DataError:
                raise
            except Exception as exc:
                raise DataError(
                    f"model {name!r} failed to score a block: {type(exc).__name__}: {exc}"
                ) from exc
        codes = slice_codes(table, cfg.columns.slices)
        gkey = (
            ranking.group_hash(table.column(cfg.columns.group).to_numpy(zero_copy_only=False))
            if cfg.columns.group
            else None
        )
        unit = gkey if gkey is not None else bootstrap.row_unit_hash(y, x)
        buckets = bootstrap.buckets_for(unit, cfg.bootstrap.seed, cfg.bootstrap.buckets)
        ascending = {m: np.argsort(s) for m, s in scores.items()}  # shared by AUC and NDCG
        partial = self._row_partial(y, scores, codes, buckets, ascending)
        if gkey is not None:
            self._add_groups(partial, gkey, y, scores, codes, buckets, ascending)
        if self.predictions_uri:
            self._write_predictions(table, scores, gkey if gkey is not None else unit)
        return partial

    def _row_partial(
        self,
        y: np.ndarray,
        scores: dict[str, np.ndarray],
        codes: dict[str, tuple[list[Any], np.ndarray]],
        buckets: np.ndarray,
        ascending: dict[str, np.ndarray],
    ) -> BlockPartial:
        cfg, n_buckets = self.cfg, self.cfg.bootstrap.buckets
        auc_cols = {cfg.columns.slices[0] if cfg.columns.slices else ALL, *cfg.columns.slices}
        terms = {m: metrics.row_terms(y, s, cfg.threshold, self.has_proba[m]) for m, s in scores.items()}
        slices: dict[str, Any] = {}
        for col, (values, row_codes) in codes.items():
            stats = {m: metrics.grouped_stats(row_codes, len(values), terms[m]) for m in scores}
            slices[col] = {"values": values, "stats": stats, "scores": {}}
            if "roc_auc" in cfg.metrics and col in auc_cols:
                key = (row_codes * 2 + y).astype(_key_dtype(2 * len(values)))
                counts = np.bincount(key, minlength=2 * len(values)).astype(np.int64)
                slices[col]["scores"] = {
                    m: (counts, _slot_sorted(key, s, ascending[m])) for m, s in scores.items()
                }
        bucket_stats = (  # only the paired bootstrap reads them
            {m: metrics.grouped_stats(buckets, n_buckets, terms[m]) for m in scores}
            if cfg.bootstrap.samples
            else {}
        )
        hist = {}
        if "roc_auc" in cfg.metrics and cfg.bootstrap.samples:
            for m, s in scores.items():
                key = (buckets * bootstrap.N_BINS + bootstrap.score_bins(s, self.has_proba[m])) * 2 + y
                hist[m] = np.unique(key, return_counts=True)
        return block_partial(rows=len(y), slices=slices, buckets=bucket_stats, hist=hist)

    def _add_groups(
        self,
        partial: BlockPartial,
        gkey: np.ndarray,
        y: np.ndarray,
        scores: dict[str, np.ndarray],
        codes: dict[str, tuple[list[Any], np.ndarray]],
        buckets: np.ndarray,
        ascending: dict[str, np.ndarray],
    ) -> None:
        starts = ranking.run_starts(gkey)
        edge = np.zeros(len(y), dtype=bool)
        first_end = starts[1] if len(starts) > 1 else len(y)
        edge[:first_end] = True
        edge[starts[-1] :] = True
        inner = ~edge
        partial["fragments"] = {
            "gkey": gkey[edge],
            "y": y[edge],
            "scores": {m: s[edge] for m, s in scores.items()},
            "slices": {
                col: [values[c] for c in row_codes[edge]]
                for col, (values, row_codes) in codes.items()
                if col != ALL
            },
            "buckets": buckets[edge],
        }
        inner_starts = starts[1:-1] - first_end if len(starts) > 2 else np.zeros(0, dtype=np.int64)
        inner_codes = {col: (values, row_codes[inner]) for col, (values, row_codes) in codes.items()}
        per_slice, per_bucket = group_partial(
            inner_starts,
            y[inner],
            {m: s[inner] for m, s in scores.items()},
            inner_codes,
            buckets[inner],
            self.cfg,
            {m: _inner_order(a, int(first_end), int(starts[-1])) for m, a in ascending.items()},
        )
        for col, by_model in per_slice.items():
            for m, stats in by_model.items():
                add_stats(partial["slices"][col]["stats"][m], stats)
        for m, stats in per_bucket.items():
            add_stats(partial["buckets"][m], stats)
        partial["complete_gkeys"] = gkey[starts[1:-1]] if len(starts) > 2 else np.zeros(0, dtype=np.uint64)

    def _write_predictions(self, table: pa.Table, scores: dict[str, np.ndarray], key: np.ndarray) -> None:
        import pyarrow as pa

        from airflow_ray_provider.workloads.common.artifacts import join, write_parquet_atomic

        cols = self.cfg.columns
        keep = [c for c in (cols.group, cols.label, *cols.slices) if c]
        out = table.select(keep)
        for name, s in scores.items():
            out = out.append_column(f"score_{name}", pa.array(s))
        digest = hashlib.sha1(np.ascontiguousarray(key).tobytes())
        digest.update(np.ascontiguousarray(next(iter(scores.values()))).tobytes())
        write_parquet_atomic(join(self.predictions_uri or "", f"part-{digest.hexdigest()[:20]}.parquet"), out)
