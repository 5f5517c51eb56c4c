"""Per-group ranking metrics (NDCG@k), vectorised over many groups of different sizes.

Matches ``sklearn.metrics.ndcg_score`` (``ignore_ties=False``) group by group:

* the discount of rank ``r`` (0-based) is ``1 / log2(r + 2)`` for ``r < k`` and 0 after;
* tied scores share the average gain of the tie, spread over the discounts of the positions they occupy
  (sklearn's ``_tie_averaged_dcg``), so the result does not depend on the order of tied rows;
* a group without any positive label has NDCG 0 and still counts in the average (sklearn does the same);
* a group of one row is allowed (sklearn refuses 1-column input; here it scores 1 if its label is 1).

Labels are binary (0/1), so the ideal DCG of a group with ``P`` positives is the sum of the first
``min(P, k)`` discounts.
"""

from __future__ import annotations

import numpy as np


def group_hash(values: np.ndarray) -> np.ndarray:
    """A stable 64-bit hash of group ids (ints or strings), the same in every process."""
    import pandas as pd

    return pd.util.hash_array(np.asarray(values), categorize=False).astype(np.uint64)


def run_starts(keys: np.ndarray) -> np.ndarray:
    """Start indices of the runs of equal consecutive ``keys``."""
    if len(keys) == 0:
        return np.zeros(0, dtype=np.int64)
    change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
    return np.concatenate(([0], change)).astype(np.int64)


def sort_with_repeats(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``keys`` sorted, and the values found more than once in it (ascending, each once).

    A sort: numpy's hash-based ``unique`` is several times slower on a million 64-bit group hashes.
    """
    ordered = np.sort(keys)
    return ordered, np.unique(ordered[1:][ordered[1:] == ordered[:-1]])


def contains_sorted(sorted_keys: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Whether each of ``keys`` is in the sorted array ``sorted_keys`` (a bool mask)."""
    if len(sorted_keys) == 0:
        return np.zeros(len(keys), dtype=bool)
    at = np.searchsorted(sorted_keys, keys)
    return np.asarray(sorted_keys[np.minimum(at, len(sorted_keys) - 1)] == keys)


def _discount_cumsum(max_len: int, k: int) -> np.ndarray:
    discount = 1.0 / np.log2(np.arange(max_len, dtype=np.float64) + 2.0)
    discount[k:] = 0.0
    return np.concatenate(([0.0], np.cumsum(discount)))


def _within_group_order(
    gid: np.ndarray, scores: np.ndarray, n_groups: int, ascending: np.ndarray | None = None
) -> np.ndarray:
    """Row order by group, then by descending score (ties in any order: NDCG averages over them).

    An unstable float sort followed by a stable sort of the group ids (radix sort when they fit in
    16 bits) is several times faster than ``np.lexsort``.

    :param ascending: the rows in ascending score order, if the caller sorted them already.
    """
    by_score = np.argsort(-scores) if ascending is None else ascending[::-1]
    small = gid.astype(np.uint16 if n_groups <= np.iinfo(np.uint16).max else np.int64)
    return by_score[np.argsort(small[by_score], kind="stable")]


def ndcg_per_group(
    starts: np.ndarray,
    y: np.ndarray,
    scores: np.ndarray,
    ks: tuple[int, ...],
    ascending: np.ndarray | None = None,
) -> dict[int, np.ndarray]:
    """NDCG@k of every group, for groups stored as consecutive runs starting at ``starts``.

    :param starts: sorted start index of each group (the first is 0).
    :param y: 0/1 labels; :param scores: model scores (higher ranks first).
    :param ascending: ``np.argsort(scores)`` if the caller has it (saves the sort).
    :returns: ``{k: float64 array with one value per group}``.
    """
    n, n_groups = len(y), len(starts)
    if n_groups == 0:
        return {k: np.zeros(0) for k in ks}
    sizes = np.diff(np.append(starts, n))
    gid = np.repeat(np.arange(n_groups), sizes)
    order = _within_group_order(gid, scores, n_groups, ascending)
    s_sorted, y_sorted = scores[order], y[order].astype(np.float64)
    rank = np.arange(n) - np.repeat(starts, sizes)
    tie_break = np.ones(n, dtype=bool)
    tie_break[1:] = (gid[1:] != gid[:-1]) | (s_sorted[1:] != s_sorted[:-1])
    tie_start = np.flatnonzero(tie_break)
    tie_len = np.diff(np.append(tie_start, n))
    tie_gain = np.add.reduceat(y_sorted, tie_start) / tie_len
    tie_gid, first = gid[tie_start], rank[tie_start]
    positives = np.bincount(gid, weights=y_sorted, minlength=n_groups).astype(np.int64)
    out = {}
    for k in ks:
        cum = _discount_cumsum(int(sizes.max()), k)
        lo, hi = np.minimum(first, k), np.minimum(first + tie_len, k)
        dcg = np.bincount(tie_gid, weights=tie_gain * (cum[hi] - cum[lo]), minlength=n_groups)
        ideal = cum[np.minimum(positives, min(k, len(cum) - 1))]
        out[k] = np.divide(dcg, ideal, out=np.zeros(n_groups), where=ideal > 0)
    return out
