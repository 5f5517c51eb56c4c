"""Exact, mergeable metric aggregation for binary classifiers and rankers.

Partial aggregates are computed per block on the scoring actors and merged on the driver. Every partial
is made of integers, so merging is exact, associative and commutative: the result does not depend on
how Ray split the data into blocks, on the order blocks arrive in, or on a block being recomputed after
a node was lost.

* counts (rows, positives, correct predictions) are integers;
* real-valued sums (predicted probabilities, log-loss terms, per-group NDCG) are kept in fixed point with
  a resolution of ``2**-60`` of their range, split into two 30-bit limbs (an error below 1e-17 per row,
  far below the 1e-9 agreement with scikit-learn that the tests check);
* ROC AUC is the Mann-Whitney statistic over the exact float64 scores of positives and negatives, ties
  counted as one half, which is what ``sklearn.metrics.roc_auc_score`` computes.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

FIXED_BITS = 60
LIMB_BITS = 30
#: Range exponents of the fixed-point sums: values lie in ``[0, 2**E]``.
RANGE_BITS = {"sum_p": 0, "sum_ll": 6, "ndcg": 0}
#: ``sklearn.metrics.log_loss`` clips probabilities to ``[eps, 1 - eps]`` with the float64 machine epsilon.
LOG_LOSS_EPS = float(np.finfo(np.float64).eps)
#: Row-level statistics kept per slice value and per bootstrap bucket.
ROW_STATS = ("rows", "pos", "correct", "sum_p_hi", "sum_p_lo", "sum_ll_hi", "sum_ll_lo")


def fixed_limbs(values: np.ndarray, range_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Split non-negative ``values < 2**range_bits`` into two integer-valued float64 limbs.

    ``value ~= (hi * 2**30 + lo) * 2**-(60 - range_bits)``; both limbs are below ``2**30 + 1``, so up to
    ``2**22`` of them add up exactly in float64 (``np.bincount``).
    """
    scaled = np.asarray(values, dtype=np.float64) * float(2 ** (FIXED_BITS - range_bits))
    hi = np.floor(scaled * float(2**-LIMB_BITS))
    lo = np.rint(scaled - hi * float(2**LIMB_BITS))
    return hi, lo


def grouped_int_sum(codes: np.ndarray, weights: np.ndarray | None, n_codes: int) -> np.ndarray:
    """Exact per-code sums of integer-valued weights (chunked so float64 bincount stays exact)."""
    if n_codes == 1:  # overall totals: a plain sum of integer-valued floats is exact below 2**53
        total = (
            len(codes)
            if weights is None
            else sum(float(weights[i : i + (1 << 22)].sum()) for i in range(0, len(codes), 1 << 22))
        )
        return np.array([total], dtype=np.int64)
    if weights is None:
        return np.bincount(codes, minlength=n_codes).astype(np.int64)
    out = np.zeros(n_codes, dtype=np.int64)
    step = 1 << 22
    for start in range(0, len(codes), step):
        part = np.bincount(
            codes[start : start + step], weights=weights[start : start + step], minlength=n_codes
        )
        out += part.astype(np.int64)
    return out


def fixed_to_float(hi: int, lo: int, range_bits: int) -> float:
    """Turn merged limb sums back into a float (correctly rounded from the exact integer)."""
    total = (int(hi) << LIMB_BITS) + int(lo)
    return math.ldexp(float(total), -(FIXED_BITS - range_bits))


def log_loss_terms(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Per-row log loss exactly as ``sklearn.metrics.log_loss`` computes it (clipped at machine epsilon)."""
    p_true = np.where(y == 1, p, 1.0 - p)
    np.clip(p_true, LOG_LOSS_EPS, 1.0 - LOG_LOSS_EPS, out=p_true)
    np.log(p_true, out=p_true)
    return np.negative(p_true, out=p_true)


def row_terms(y: np.ndarray, p: np.ndarray, threshold: float, proba: bool) -> dict[str, np.ndarray | None]:
    """One model's per-row integer-valued weights of :data:`ROW_STATS` (``None``: count the rows).

    Computed once per block and model, then summed per code set by :func:`grouped_stats`.

    :param y: 0/1 labels; :param p: scores (probabilities when ``proba``).
    """
    terms: dict[str, np.ndarray | None] = {"rows": None, "pos": y.astype(np.float64)}
    if not proba:
        return terms
    terms["correct"] = ((p >= threshold) == (y == 1)).astype(np.float64)
    for name, values in (("sum_p", p), ("sum_ll", log_loss_terms(y, p))):
        terms[f"{name}_hi"], terms[f"{name}_lo"] = fixed_limbs(values, RANGE_BITS[name])
    return terms


def grouped_stats(
    codes: np.ndarray, n_codes: int, terms: Mapping[str, np.ndarray | None]
) -> dict[str, np.ndarray]:
    """Exact per-code sums of :func:`row_terms` (``codes``: int code per row in ``[0, n_codes)``)."""
    return {key: grouped_int_sum(codes, weights, n_codes) for key, weights in terms.items()}


def row_stats(
    codes: np.ndarray, n_codes: int, y: np.ndarray, p: np.ndarray, threshold: float, proba: bool
) -> dict[str, np.ndarray]:
    """Integer sufficient statistics per code (slice value or bootstrap bucket) for one model.

    :param codes: int code per row in ``[0, n_codes)``.
    :param y: 0/1 labels; :param p: scores (probabilities when ``proba``).
    """
    return grouped_stats(codes, n_codes, row_terms(y, p, threshold, proba))


def auc_from_scores(pos: np.ndarray, neg: np.ndarray) -> float | None:
    """Exact ROC AUC (Mann-Whitney U with ties as 1/2) from positive and negative scores.

    :returns: None when either class is absent (AUC is undefined there).
    """
    return auc_from_twice_u(twice_u_sorted(np.sort(pos), np.sort(neg)), len(pos), len(neg))


def auc_from_twice_u(twice_u: int, n_pos: int, n_neg: int) -> float | None:
    """The AUC of ``2U`` over ``n_pos`` positives and ``n_neg`` negatives (None when a class is absent)."""
    return twice_u / (2.0 * n_pos * n_neg) if n_pos and n_neg else None


def twice_u_sorted(pos: np.ndarray, neg: np.ndarray) -> int:
    """``2U`` (pairs with the positive above count 2, ties 1) of sorted positive and negative scores."""
    if len(pos) <= len(neg):  # look the smaller class up in the larger
        return ranks_in(neg, pos)
    return 2 * len(pos) * len(neg) - ranks_in(pos, neg)


#: Scores looked up per ``searchsorted`` call in :func:`ranks_in` (bounds its index temporaries).
AUC_CHUNK = 1 << 20


def ranks_in(haystack: np.ndarray, needles: np.ndarray) -> int:
    """``sum over needles of (#haystack < needle + #haystack <= needle)``; both sorted ascending.

    With positives ``p`` and negatives ``n``: ``2U = ranks_in(n, p) = 2PN - ranks_in(p, n)``.
    """
    if len(haystack) == 0:
        return 0
    total = 0
    for start in range(0, len(needles), AUC_CHUNK):
        chunk = needles[start : start + AUC_CHUNK]
        below = np.searchsorted(haystack, chunk, side="left")
        total += 2 * int(below.sum(dtype=np.int64))
        tied = haystack[np.minimum(below, len(haystack) - 1)] == chunk  # only ties need the right side
        if tied.any():
            at_or_below = np.searchsorted(haystack, chunk[tied], side="right")
            total += int((at_or_below - below[tied]).sum(dtype=np.int64))
    return total


def merge_sorted(parts: Sequence[np.ndarray]) -> np.ndarray:
    """One ascending array from ascending pieces (sorting concatenated runs is fast)."""
    if len(parts) == 1:
        return parts[0]
    merged = np.concatenate(parts) if parts else np.zeros(0)
    merged.sort()
    return merged


def point_metrics(
    stats: Mapping[str, int], metrics: tuple[str, ...], ks: tuple[int, ...]
) -> dict[str, float | None]:
    """Metric values from merged integer statistics of one (model, slice).

    ``roc_auc`` is added by the caller (it needs the scores). Undefined values are None, never NaN.
    """
    rows, pos = int(stats["rows"]), int(stats["pos"])
    out: dict[str, float | None] = {}
    if rows == 0:
        return out
    if "accuracy" in metrics:
        out["accuracy"] = int(stats["correct"]) / rows
    if "log_loss" in metrics:
        out["log_loss"] = fixed_to_float(stats["sum_ll_hi"], stats["sum_ll_lo"], RANGE_BITS["sum_ll"]) / rows
    if "calibration" in metrics:
        sum_p = fixed_to_float(stats["sum_p_hi"], stats["sum_p_lo"], RANGE_BITS["sum_p"])
        out["mean_predicted_ctr"] = sum_p / rows
        out["observed_ctr"] = pos / rows
        out["calibration_ratio"] = sum_p / pos if pos else None
        out["calibration_error"] = abs(sum_p / pos - 1.0) if pos else None
    if "ndcg" in metrics:
        groups = int(stats.get("groups", 0))
        for k in ks:
            total = fixed_to_float(stats[f"ndcg@{k}_hi"], stats[f"ndcg@{k}_lo"], RANGE_BITS["ndcg"])
            out[f"ndcg@{k}"] = total / groups if groups else None
    return out
