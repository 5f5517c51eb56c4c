"""The evaluation's vocabulary: engines, metric families, the keys each reports and which way is better.

Import-free on purpose (the standard library only, nothing of the provider): the config module, the
metric code and the champion-vs-challenger template read the same table from here, so a DAG file that
checks its decision policy against the metrics an evaluation will produce loads nothing heavy.
"""

from __future__ import annotations

from collections.abc import Iterable

#: ``engine`` values: ``auto`` picks in-process or Ray (see :mod:`~.engine`).
ENGINES = ("auto", "ray", "local")

#: Metric families (the ``metrics`` config key) -> the keys each writes into ``metrics.json`` and the
#: direction of each key: ``higher`` / ``lower`` is better, ``target_1`` (best at 1.0), ``none``
#: (informational). ``ndcg`` writes one ``ndcg@k`` key per cut-off ``k`` (see :func:`metric_directions`).
METRIC_KEYS: dict[str, dict[str, str]] = {
    "accuracy": {"accuracy": "higher"},
    "roc_auc": {"roc_auc": "higher"},
    "log_loss": {"log_loss": "lower"},
    "calibration": {
        "mean_predicted_ctr": "none",
        "observed_ctr": "none",
        "calibration_ratio": "target_1",
        "calibration_error": "lower",
    },
    "ndcg": {},
}
KNOWN_METRICS = tuple(METRIC_KEYS)
DEFAULT_METRICS = KNOWN_METRICS
#: Families that need probabilities (a model's ``predict_proba``), not only a ranking score.
PROBABILITY_METRICS = frozenset({"accuracy", "log_loss", "calibration"})
#: Families computed from a ranking score (any monotone score works; hard 0/1 labels make them coarse).
RANKING_METRICS = frozenset({"roc_auc", "ndcg"})
#: ``models.<name>.score_method`` values (unset: ``predict_proba``, else ``predict`` with checks).
SCORE_METHODS = ("predict_proba", "decision_function", "predict")


def metric_directions(metrics: Iterable[str], ks: Iterable[int]) -> dict[str, str]:
    """Every key ``metrics.json`` reports for these families and NDCG cut-offs, with its direction.

    :param metrics: metric families (``accuracy``, ``roc_auc``, ``log_loss``, ``calibration``, ``ndcg``).
    :param ks: NDCG cut-offs (used when ``ndcg`` is among ``metrics``).
    """
    wanted = set(metrics)
    out: dict[str, str] = {}
    for family, keys in METRIC_KEYS.items():
        if family in wanted:
            out.update(keys)
    if "ndcg" in wanted:
        out.update({f"ndcg@{k}": "higher" for k in ks})
    return out
