"""Driver-side merge of the per-block partials into exact metrics, per model and per slice.

Everything merged here is an integer (counts, fixed-point sums, histograms) or a multiset of exact float64
scores, so the result is the same whatever the block boundaries, the arrival order, or recomputed blocks.
Memory: constant except for the exact AUCs' scores and 8 bytes per group id (for the group-contiguity
check); predictions themselves never reach the driver. The scores take 8 bytes per row and model, per AUC
slice column; up to ``auc_memory_mb`` they are held in memory (finalize then adds one model's scores
once more, one model at a time); above it every block's scores go to a temp file and finalize reads
them back in passes of about that size (:mod:`~.spill`), with the same bits.
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_ray_provider.workloads.common.errors import DataError
from airflow_ray_provider.workloads.evaluation import bootstrap, metrics, ranking, spill
from airflow_ray_provider.workloads.evaluation.block import ALL, BlockPartial, add_stats, group_partial
from airflow_ray_provider.workloads.evaluation.names import metric_directions

if TYPE_CHECKING:
    from airflow_ray_provider.workloads.evaluation.config import EvalConfig

log = logging.getLogger(__name__)
#: Threads computing the exact AUCs at finalize (two: champion and challenger at once).
AUC_THREADS = 2


@dataclass
class EvalResult:
    """Final metrics: overall per model, per slice rows, bootstrap deltas."""

    rows: int
    groups: int | None
    overall: dict[str, dict[str, Any]]
    slice_rows: list[dict[str, Any]]
    deltas: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)


class Accumulator:
    """Merges partials as they stream in; :meth:`finalize` turns them into an :class:`EvalResult`."""

    def __init__(self, cfg: EvalConfig, has_proba: dict[str, bool]) -> None:
        self.cfg, self.has_proba = cfg, has_proba
        self.models = cfg.model_names
        self.cols = (ALL, *cfg.columns.slices)
        self.ids: dict[str, dict[Any, int]] = {c: {} for c in self.cols}
        self.values: dict[str, list[Any]] = {c: [] for c in self.cols}
        self.stats: dict[str, dict[str, dict[str, np.ndarray]]] = {
            c: {m: {} for m in self.models} for c in self.cols
        }
        self.scores: dict[str, dict[str, dict[tuple[int, int], list[np.ndarray]]]] = {
            c: {m: {} for m in self.models} for c in self.cols
        }
        self.budget = int(cfg.auc_memory_mb * 2**20)
        self.held: list[tuple[str, str, np.ndarray, np.ndarray, np.ndarray]] = []  # what `scores` views
        self.held_bytes = 0
        self.store: spill.SpillFile | None = None
        self.spilled: dict[tuple[str, str], spill.SpilledScores] = {}
        self.buckets: dict[str, dict[str, np.ndarray]] = {m: {} for m in self.models}
        self.hist: dict[str, np.ndarray] = {}
        self.complete: list[np.ndarray] = []
        self.fragments: list[dict[str, Any]] = []
        self.rows = 0
        self.span = (float("inf"), float("-inf"))

    def _global_ids(self, col: str, values: list[Any]) -> np.ndarray:
        ids, known = self.ids[col], self.values[col]
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            if v not in ids:
                ids[v] = len(known)
                known.append(v)
            out[i] = ids[v]
        return out

    def add(self, partial: BlockPartial) -> None:
        """Merge one block's partial."""
        self.rows += int(partial["rows"])
        if "span" in partial:
            self.span = (min(self.span[0], partial["span"][0]), max(self.span[1], partial["span"][1]))
        for col, part in partial["slices"].items():
            gids = self._global_ids(col, part["values"])
            size = len(self.values[col])
            for m, stats in part["stats"].items():
                _scatter_add(self.stats[col][m], stats, gids, size)
            for m, (counts, sorted_scores) in part["scores"].items():
                self._add_scores(col, m, gids, counts, sorted_scores)
        if self.store is None and self.held_bytes > self.budget:  # every model has scores held now
            self._start_spilling()
        for m, stats in partial["buckets"].items():
            add_stats(self.buckets[m], stats)
        for m, (keys, counts) in partial["hist"].items():
            if m not in self.hist:
                self.hist[m] = np.zeros(self.cfg.bootstrap.buckets * bootstrap.N_BINS * 2, dtype=np.int64)
            self.hist[m][keys] += counts
        if partial["complete_gkeys"] is not None:
            self.complete.append(partial["complete_gkeys"])
        if partial["fragments"] is not None and len(partial["fragments"]["gkey"]):
            self.fragments.append(partial["fragments"])

    def _add_scores(
        self, col: str, model: str, gids: np.ndarray, counts: np.ndarray, sorted_scores: np.ndarray
    ) -> None:
        """Hold one block's AUC scores (as views per slot), or spill them (once over the budget)."""
        if self.store is None:
            bounds = np.concatenate(([0], np.cumsum(counts)))
            for key in np.flatnonzero(counts):
                slot = (int(gids[key // 2]), int(key % 2))
                self.scores[col][model].setdefault(slot, []).append(
                    sorted_scores[bounds[key] : bounds[key + 1]]
                )
            self.held.append((col, model, gids, counts, sorted_scores))
            self.held_bytes += sorted_scores.nbytes
        else:
            self.spilled[(col, model)].add(gids, counts, sorted_scores)

    def _start_spilling(self) -> None:
        """Open the spill file, choose each model's bucket edges from the held scores, spill them all."""
        first = self._overall_column()
        self.store = spill.SpillFile(self.cfg.spill_dir)
        edges = {}
        for m in self.models:
            held = [
                s[:: spill.SAMPLE_STEP] for col, model, _, _, s in self.held if col == first and model == m
            ]
            edges[m] = spill.bucket_edges(np.concatenate(held) if held else np.zeros(0))
        self.spilled = {
            (c, m): spill.SpilledScores(self.store, edges[m]) for c in self.cols for m in self.models
        }
        for col, model, gids, counts, sorted_scores in self.held:
            self.spilled[(col, model)].add(gids, counts, sorted_scores)
        self.held, self.held_bytes = [], 0
        self.scores = {c: {m: {} for m in self.models} for c in self.cols}
        log.info("AUC scores over auc_memory_mb=%g: spilling them to a temp file", self.cfg.auc_memory_mb)

    def _overall_column(self) -> str:
        """The AUC column whose scores give the overall AUC (every row is in one of its slots)."""
        return self.cfg.columns.slices[0] if self.cfg.columns.slices else ALL

    def close(self) -> None:
        """Free the spill file (if any); :meth:`finalize` does it when done, whatever happens.

        An accumulator dropped without finalize (a failed stream) frees it when collected (the file
        object closes itself), and at the latest when the process ends: the file has no name.
        """
        if self.store is not None:
            self.store.close()

    def finalize(self) -> EvalResult:
        """Complete the fragment groups, check group contiguity, and compute every metric.

        The exact AUCs (:meth:`_aucs`) run on :data:`AUC_THREADS` threads: numpy sorts and searches
        without the GIL. The spill file is closed at the end, whatever happens.
        """
        try:
            return self._finalize()
        finally:
            self.close()

    def _finalize(self) -> EvalResult:
        if self.rows == 0:
            raise DataError(f"no rows were read from {self.cfg.data_uri!r}: the dataset is empty")
        groups = self._finish_groups() if self.cfg.columns.group else None
        cells = [(ALL, 0, m) for m in self.models]
        labels = []
        for col in self.cfg.columns.slices:
            order = sorted(range(len(self.values[col])), key=lambda i: str(self.values[col][i]))
            for gid in order:
                labels.extend([f"{col}={self.values[col][gid]}"] * len(self.models))
                cells.extend((col, gid, m) for m in self.models)
        aucs = self._aucs(cells)
        values = [self._metrics_for(cell, auc) for cell, auc in zip(cells, aucs, strict=True)]
        overall = dict(zip(self.models, values[: len(self.models)], strict=True))
        slice_rows = [
            {"slice": label, "model": cell[2], **row}
            for label, cell, row in zip(
                labels, cells[len(self.models) :], values[len(self.models) :], strict=True
            )
        ]
        return EvalResult(rows=self.rows, groups=groups, overall=overall, slice_rows=slice_rows)

    def _aucs(self, cells: list[tuple[str, int, str]]) -> list[float | None]:
        """The exact AUC of each ``(column, slice id, model)`` (``None`` each when AUC is not asked for).

        One task per AUC column and model (:meth:`_column_aucs`), on :data:`AUC_THREADS` threads; the
        overall AUC comes from the first slice column's tasks, one at a time (each merges all of a
        model's scores once: two at once would hold twice that), every other task doing its slice
        values first so that it does not wait.
        """
        if "roc_auc" not in self.cfg.metrics:
            return [None] * len(cells)
        first = self._overall_column()
        if self.store is not None:
            tasks = [key for key, scores in self.spilled.items() if scores.records]
            pass_scores = max(1, self.budget // (AUC_THREADS * spill.PASS_BYTES_PER_SCORE))
            log.info("reading back %d bytes of spilled AUC scores", self.store.size)
        else:
            tasks = [(col, m) for col in self.cols for m in self.models if self.scores[col][m]]
        one_at_a_time = threading.Lock()

        def run(i: int) -> tuple[dict[int, float | None], float | None]:
            col, m = tasks[i]
            if self.store is not None:
                per_value, overall = self.spilled[(col, m)].aucs(pass_scores, overall=col == first)
                return {g: t.auc for g, t in per_value.items()}, overall.auc if overall else None
            return self._column_aucs(
                col, m, one_at_a_time if col == first else None, overall_first=i % 2 == 0
            )

        with concurrent.futures.ThreadPoolExecutor(AUC_THREADS, "eval-auc") as pool:
            done = dict(zip(tasks, pool.map(run, range(len(tasks))), strict=True))
        out: list[float | None] = []
        for col, gid, m in cells:
            if col == ALL:
                out.append(done[(first, m)][1] if (first, m) in done else None)
            else:
                out.append(done[(col, m)][0].get(gid) if (col, m) in done else None)
        return out

    def _column_aucs(
        self, col: str, model: str, overall: threading.Lock | None, *, overall_first: bool
    ) -> tuple[dict[int, float | None], float | None]:
        """The exact AUC of ``model`` on each value of slice column ``col`` (and on all rows).

        The pieces of each slot arrive sorted (one per block), so each class is merged from sorted
        runs (fast) into one array, sorted in place.

        :param overall: held while all rows' AUC is computed (``None``: not computed here).
        :param overall_first: compute all rows' AUC before the values' (else after).
        """
        slots = self.scores[col][model]
        result: float | None = None

        def all_rows() -> float | None:
            assert overall is not None
            with overall:
                pos, neg = (
                    metrics.merge_sorted([a for (_, c), parts in slots.items() if c == label for a in parts])
                    for label in (1, 0)
                )
                return metrics.auc_from_twice_u(metrics.twice_u_sorted(pos, neg), len(pos), len(neg))

        if overall is not None and overall_first:
            result = all_rows()
        by_value: dict[int, dict[int, list[np.ndarray]]] = {}
        for (gid, label), parts in slots.items():
            by_value.setdefault(gid, {})[label] = parts
        per_value: dict[int, float | None] = {}
        for gid, classes in by_value.items():
            pos, neg = (metrics.merge_sorted(classes.get(c, [])) for c in (1, 0))
            per_value[gid] = metrics.auc_from_twice_u(metrics.twice_u_sorted(pos, neg), len(pos), len(neg))
        if overall is not None and not overall_first:
            result = all_rows()
        return per_value, result

    def _metrics_for(self, cell: tuple[str, int, str], auc: float | None) -> dict[str, Any]:
        col, gid, model = cell
        stats = {k: int(v[gid]) for k, v in self.stats[col][model].items()}
        out: dict[str, Any] = {"rows": stats["rows"]}
        values = metrics.point_metrics(stats, self.cfg.metrics, self.cfg.ndcg_k)
        if "roc_auc" in self.cfg.metrics:
            values["roc_auc"] = auc
        for name in metric_directions(self.cfg.metrics, self.cfg.ndcg_k):
            out[name] = values.get(name)
        return out

    def _finish_groups(self) -> int:
        frag_keys = self._merge_fragments()
        complete = np.concatenate(self.complete) if self.complete else np.zeros(0, dtype=np.uint64)
        complete, repeated = ranking.sort_with_repeats(complete)
        if len(repeated) or ranking.contains_sorted(complete, frag_keys).any():
            raise DataError(
                f"rows of a group ({self.cfg.columns.group!r}) are not stored together: NDCG and the group "
                f"bootstrap need each group's rows consecutive in the files. Sort the log by "
                f"{self.cfg.columns.group!r} (e.g. ds.sort(...).write_parquet(...)) and rerun"
            )
        return int(len(complete) + len(frag_keys))

    def _merge_fragments(self) -> np.ndarray:
        if not self.fragments:
            return np.zeros(0, dtype=np.uint64)
        frags = self.fragments
        gkey = np.concatenate([f["gkey"] for f in frags])
        order = np.argsort(gkey, kind="stable")
        gkey = gkey[order]
        y = np.concatenate([f["y"] for f in frags])[order]
        scores = {m: np.concatenate([f["scores"][m] for f in frags])[order] for m in self.models}
        buckets = np.concatenate([f["buckets"] for f in frags])[order]
        codes: dict[str, tuple[list[Any], np.ndarray]] = {ALL: (["all"], np.zeros(len(gkey), dtype=np.int64))}
        for col in self.cfg.columns.slices:
            flat = [v for f in frags for v in f["slices"][col]]
            codes[col] = (self.values[col], self._global_ids(col, flat)[order])
        starts = ranking.run_starts(gkey)
        per_slice, per_bucket = group_partial(starts, y, scores, codes, buckets, self.cfg)
        for col, by_model in per_slice.items():
            for m, stats in by_model.items():
                _scatter_add(
                    self.stats[col][m], stats, np.arange(len(self.values[col])), len(self.values[col])
                )
        for m, stats in per_bucket.items():
            add_stats(self.buckets[m], stats)
        return gkey[starts]


def _scatter_add(
    into: dict[str, np.ndarray], stats: dict[str, np.ndarray], gids: np.ndarray, size: int
) -> None:
    """Add local per-code statistics into global arrays indexed by ``gids`` (growing them to ``size``)."""
    for key, local in stats.items():
        current = into.get(key)
        if current is None or len(current) < size:
            grown = np.zeros(max(size, 2 * len(current) if current is not None else size), dtype=np.int64)
            if current is not None:
                grown[: len(current)] = current
            into[key] = current = grown
        current[gids] += local
