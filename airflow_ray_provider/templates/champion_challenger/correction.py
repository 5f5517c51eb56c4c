"""Multiple-comparison correction of the primary metric when many challengers face one champion.

With 50 challengers each tested at 2.5 %, about one is "significantly better" by chance on every run.
The correction keeps the chance of promoting *any* challenger that is in truth no better (the
family-wise error rate) at ``alpha``:

* ``holm`` (default): Holm-Bonferroni step-down. Sort the ``m`` p-values; the ``i``-th smallest
  (from 1) is adjusted to ``max over j <= i of min(1, (m - j + 1) * p_j)``. Never less powerful than
  Bonferroni, and valid under any dependence between the tests (all challengers share the champion);
* ``bonferroni``: every p-value times ``m`` (capped at 1);
* ``none``: each challenger is judged alone (the family-wise error grows with the number of challengers).

A challenger is significant when its adjusted p-value is at most ``alpha``. The p-value is the
evaluation's one-sided ``p_value`` ("no better than the champion", see
:mod:`airflow_ray_provider.workloads.evaluation.bootstrap`), or, for an artifact without one, the
normal approximation read off the confidence interval (``se = width / (2 z)``). ``alpha`` defaults to
the one-sided level of the evaluation's interval, ``(1 - confidence) / 2`` (0.025 for a 95 % CI), so one
challenger is judged exactly as "lower bound of the CI above zero" judged it. Pure standard library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import NormalDist
from typing import Any

CORRECTIONS = ("holm", "bonferroni", "none")


def adjust(p_values: Mapping[str, float], method: str) -> dict[str, float]:
    """Adjusted p-values, by candidate name.

    :param p_values: one-sided p-value of each candidate (the family: every candidate with a p-value).
    :param method: ``holm``, ``bonferroni`` or ``none``.
    """
    m = len(p_values)
    if method == "none":
        return dict(p_values)
    if method == "bonferroni":
        return {name: min(1.0, m * p) for name, p in p_values.items()}
    if method != "holm":
        raise ValueError(f"unknown correction {method!r}; choose from {list(CORRECTIONS)}")
    adjusted: dict[str, float] = {}
    running = 0.0
    for rank, (name, p) in enumerate(sorted(p_values.items(), key=lambda item: (item[1], item[0]))):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[name] = running
    return adjusted


def default_alpha(evaluation: Mapping[str, Any]) -> float:
    """The one-sided level of the evaluation's bootstrap interval: ``(1 - confidence) / 2``."""
    confidence = (evaluation.get("bootstrap") or {}).get("confidence") or 0.95
    return (1.0 - float(confidence)) / 2.0


def p_value(stats: Mapping[str, Any], direction: str, confidence: float) -> float | None:
    """A delta's one-sided p-value: the artifact's own, else the normal approximation from its CI.

    :param stats: ``{delta, ci_low, ci_high[, p_value]}`` of one challenger and metric.
    :param direction: ``higher`` or ``lower`` is better.
    :param confidence: the interval's confidence (e.g. 0.95).
    """
    given = _finite(stats.get("p_value"))
    if given is not None:
        return given
    delta, low, high = (_finite(stats.get(k)) for k in ("delta", "ci_low", "ci_high"))
    if delta is None or low is None or high is None or direction not in ("higher", "lower"):
        return None
    lift = delta if direction == "higher" else -delta
    z = NormalDist().inv_cdf(1.0 - (1.0 - confidence) / 2.0)
    se = (high - low) / (2.0 * z)
    if se <= 0:
        return 0.0 if lift > 0 else 1.0
    return 0.5 * math.erfc(lift / (se * math.sqrt(2.0)))


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
