"""Seeded, paired, streaming bootstrap of model-minus-baseline metric deltas.

Method (constant memory, whatever the data size):

* every resampling unit (a group when ``columns.group`` is set, else a row) is hashed, with the seed, into
  one of ``buckets`` buckets; the scoring actors add per-bucket integer sufficient statistics, which merge
  exactly like the point metrics;
* each bootstrap replicate draws ``buckets`` buckets with replacement (multinomial weights) and recomputes
  every metric of every model from the weighted bucket sums; the same weights serve all models, so the
  deltas are paired. Groups are assigned to buckets at random, so resampling buckets is a cluster
  bootstrap whose clusters are random unions of groups: it keeps whole groups together and has the same
  variance as resampling groups, up to the ``1/buckets`` granularity (1000 buckets by default);
* AUC replicates use per-bucket score histograms on 1250 bins (log-spaced towards both 0 and 1, about 6 %
  relative width); pairs inside one bin count as ties. The resulting bias is removed by centring: the CI
  of an AUC delta is the exact point delta plus the quantiles of (replicate delta - full-data binned
  delta). All other replicate metrics are exact functions of the weighted sums.

The interval is the percentile interval at ``confidence``; replicates where a metric is undefined are
dropped (NaN-aware quantiles).

For the multiple-comparison correction of the decision (many challengers against one champion), each
delta of a ``higher``/``lower`` metric also carries its bootstrap standard error ``se`` (the standard
deviation of the replicate deltas) and a one-sided ``p_value`` for "the model is no better than the
baseline", from the normal approximation ``Phi(-lift / se)``. A normal p-value, not the share of
replicates below zero: 200 replicates cannot resolve the ``alpha / 50`` a 50-way Holm correction needs.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow_ray_provider.workloads.evaluation.config import EvalConfig

_MANTISSA_BITS = 4
_LOWEST_EXP = -40
_HALF = ((1022 - (1023 + _LOWEST_EXP)) << _MANTISSA_BITS) + 1
N_BINS = 2 * _HALF


def buckets_for(unit_hash: np.ndarray, seed: int, n_buckets: int) -> np.ndarray:
    """Bucket of each unit: a seeded splitmix64 of its 64-bit hash, modulo ``n_buckets``."""
    with np.errstate(over="ignore"):
        z = unit_hash.astype(np.uint64) + np.uint64((0x9E3779B97F4A7C15 * (seed + 1)) & 0xFFFFFFFFFFFFFFFF)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z % np.uint64(n_buckets)).astype(np.int64)


def row_unit_hash(y: np.ndarray, features: np.ndarray) -> np.ndarray:
    """Unit hash for row-level resampling: from the label and the exact feature values.

    Independent of the blocking and of the models (every model group of a packed run, and a run of any
    subset of the models, puts a row in the same bucket).

    :param features: ``rows x features`` float64 matrix.
    """
    from airflow_ray_provider.workloads.evaluation.ranking import group_hash

    mixed = y.astype(np.uint64)
    with np.errstate(over="ignore"):
        for j in range(features.shape[1]):
            column = np.ascontiguousarray(features[:, j], dtype=np.float64).view(np.uint64)
            mixed = mixed * np.uint64(0x100000001B3) ^ column
    return group_hash(mixed)


def score_bins(scores: np.ndarray, is_probability: bool) -> np.ndarray:
    """Monotone bin index in ``[0, N_BINS)`` of each score (logistic transform first for raw scores)."""
    p = np.asarray(scores, dtype=np.float64)
    if not is_probability:
        p = 0.5 * (1.0 + np.tanh(0.5 * p))
    low = p < 0.5
    q = np.clip(np.where(low, p, 1.0 - p), 2.0**_LOWEST_EXP, 0.5)
    idx = (q.view(np.uint64) >> np.uint64(52 - _MANTISSA_BITS)).astype(np.int64) - (
        (1023 + _LOWEST_EXP) << _MANTISSA_BITS
    )
    return np.where(low, idx, 2 * _HALF - 1 - idx)


def multinomial_weights(samples: int, n_buckets: int, seed: int) -> np.ndarray:
    """``samples x n_buckets`` bucket multiplicities, each row summing to ``n_buckets``."""
    rng = np.random.default_rng(seed)
    return rng.multinomial(n_buckets, np.full(n_buckets, 1.0 / n_buckets), size=samples).astype(np.float64)


def binned_auc(pos: np.ndarray, neg: np.ndarray) -> np.ndarray:
    """AUC from (..., N_BINS) positive/negative histograms, pairs in one bin counting as ties."""
    below = np.cumsum(neg, axis=-1) - neg
    twice_u = (pos * (2.0 * below + neg)).sum(axis=-1)
    denom = 2.0 * pos.sum(axis=-1) * neg.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, twice_u / np.where(denom > 0, denom, 1.0), np.nan)


def replicate_metrics(
    sums: dict[str, np.ndarray], ks: tuple[int, ...], metrics: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """Metric values of each replicate from weighted bucket sums (float arrays of shape ``(samples,)``)."""
    from airflow_ray_provider.workloads.evaluation.metrics import FIXED_BITS, LIMB_BITS, RANGE_BITS

    def fixed(name: str, bits: int) -> np.ndarray:
        return (sums[f"{name}_hi"] * float(2**LIMB_BITS) + sums[f"{name}_lo"]) * float(
            2.0 ** -(FIXED_BITS - bits)
        )

    rows, pos = sums["rows"], sums["pos"]
    out: dict[str, np.ndarray] = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        if "accuracy" in metrics:
            out["accuracy"] = sums["correct"] / rows
        if "log_loss" in metrics:
            out["log_loss"] = fixed("sum_ll", RANGE_BITS["sum_ll"]) / rows
        if "calibration" in metrics:
            sum_p = fixed("sum_p", RANGE_BITS["sum_p"])
            out["mean_predicted_ctr"] = sum_p / rows
            out["observed_ctr"] = pos / rows
            out["calibration_ratio"] = sum_p / pos
            out["calibration_error"] = np.abs(sum_p / pos - 1.0)
        if "ndcg" in metrics:
            for k in ks:
                out[f"ndcg@{k}"] = fixed(f"ndcg@{k}", RANGE_BITS["ndcg"]) / sums["groups"]
        if "roc_auc" in metrics:
            out["roc_auc"] = binned_auc(sums["hist_pos"], sums["hist_neg"])
    return out


def percentile_interval(values: np.ndarray, confidence: float) -> tuple[float | None, float | None]:
    """NaN-aware percentile interval; (None, None) when no replicate is defined."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None, None
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(finite, [alpha, 1.0 - alpha])
    return float(low), float(high)


def _replicates(
    bucket_stats: dict[str, np.ndarray],
    hist: np.ndarray | None,
    weights: np.ndarray,
    ks: tuple[int, ...],
    metrics: tuple[str, ...],
) -> tuple[dict[str, np.ndarray], float | None]:
    """Replicate metrics of one model, and its full-data binned AUC (for centring)."""
    sums = {k: weights @ v.astype(np.float64) for k, v in bucket_stats.items()}
    full_auc = None
    if hist is not None:
        cube = hist.reshape(weights.shape[1], N_BINS, 2).astype(np.float64)
        sums["hist_pos"], sums["hist_neg"] = weights @ cube[:, :, 1], weights @ cube[:, :, 0]
        full = binned_auc(cube[:, :, 1].sum(axis=0), cube[:, :, 0].sum(axis=0))
        full_auc = float(full) if np.isfinite(full) else None
    elif "roc_auc" in metrics:
        metrics = tuple(m for m in metrics if m != "roc_auc")
    return replicate_metrics(sums, ks, metrics), full_auc


def one_sided_p(delta: float, se: float | None, direction: str) -> float | None:
    """``P(lift <= 0)`` under the normal approximation: the p-value of "no better than the baseline".

    :param delta: model minus baseline; :param se: its bootstrap standard error;
    :param direction: ``higher`` or ``lower`` is better (other directions have no one-sided test).
    """
    if se is None or direction not in ("higher", "lower") or not math.isfinite(delta):
        return None
    lift = delta if direction == "higher" else -delta
    if se <= 0:
        return 0.0 if lift > 0 else 1.0
    return 0.5 * math.erfc(lift / (se * math.sqrt(2.0)))


def _standard_error(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.std(finite, ddof=1)) if finite.size > 1 else None


def paired_deltas(
    cfg: EvalConfig,
    bucket_stats: dict[str, dict[str, np.ndarray]],
    hist: dict[str, np.ndarray],
    overall: dict[str, dict[str, float | None]],
    metric_names: list[str],
    *,
    directions: Mapping[str, str] | None = None,
) -> dict[str, dict[str, dict[str, float | None]]]:
    """``{model: {metric: {delta, ci_low, ci_high[, se, p_value]}}}`` for every non-baseline model.

    :param directions: each metric's direction; given, ``higher``/``lower`` metrics also get ``se`` and
        the one-sided ``p_value`` of :func:`one_sided_p` (the input of the decision's correction).
    """
    base, boot = cfg.baseline, cfg.bootstrap
    reps: dict[str, dict[str, np.ndarray]] = {}
    full_auc: dict[str, float | None] = {}
    if boot.samples:
        weights = multinomial_weights(boot.samples, boot.buckets, boot.seed)
        for m in cfg.model_names:
            reps[m], full_auc[m] = _replicates(bucket_stats[m], hist.get(m), weights, cfg.ndcg_k, cfg.metrics)
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for m in cfg.model_names[1:]:
        out[m] = {}
        for name in metric_names:
            a, b = overall[m].get(name), overall[base].get(name)
            delta = None if a is None or b is None else a - b
            low = high = se = None
            if delta is not None and name in reps.get(m, {}) and name in reps.get(base, {}):
                diffs = reps[m][name] - reps[base][name]
                low, high = percentile_interval(diffs, boot.confidence)
                se = _standard_error(diffs)
                if (
                    name == "roc_auc"
                    and low is not None
                    and full_auc[m] is not None
                    and full_auc[base] is not None
                ):
                    shift = delta - (full_auc[m] - full_auc[base])  # type: ignore[operator]
                    low, high = low + shift, high + shift  # type: ignore[operator]
            out[m][name] = {"delta": delta, "ci_low": low, "ci_high": high}
            direction = (directions or {}).get(name)
            if direction in ("higher", "lower"):
                out[m][name]["se"] = se
                out[m][name]["p_value"] = None if delta is None else one_sided_p(delta, se, direction)
    return out
