"""The rules of a decision policy applied to one challenger: each yields a :class:`Check`.

Every rule yields a :class:`Check` with status ``pass``, ``fail`` or ``unknown``. "Better" follows the
direction the evaluation artifact records per metric (``metric_directions``): ``higher`` (accuracy,
roc_auc, ndcg@k), ``lower`` (log_loss, calibration_error) or ``target_1`` (calibration_ratio: closer to
1 is better). Lifts and regressions are absolute differences in the metric's own unit. Pure functions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.templates.champion_challenger.policy import (
    DecisionPolicy,
    Guardrail,
    PolicyError,
    PrimaryMetric,
)

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
DIRECTIONS = ("higher", "lower", "target_1")


@dataclass(frozen=True)
class Significance:
    """The primary metric's test for one challenger, after the correction over every challenger.

    :param p_value: one-sided p-value of "no better than the champion" (``None``: none available).
    :param p_adjusted: after the correction; :param alpha: the family-wise level it is compared with.
    :param correction: ``holm``, ``bonferroni`` or ``none``; :param family: challengers in the family.
    """

    p_value: float | None
    p_adjusted: float | None
    alpha: float
    correction: str
    family: int

    @property
    def significant(self) -> bool:
        """Whether the corrected test says the challenger is better."""
        return self.p_adjusted is not None and self.p_adjusted <= self.alpha

    def describe(self) -> str:
        """``p=0.0012, Holm-adjusted p=0.0480 over 40 challengers, alpha 0.025``."""
        if self.p_value is None or self.p_adjusted is None:
            return "no p-value"
        if self.correction == "none" or self.family <= 1:
            return f"p={self.p_value:.2g}, alpha {self.alpha:g}"
        name = "Holm" if self.correction == "holm" else "Bonferroni"
        return (
            f"p={self.p_value:.2g}, {name}-adjusted p={self.p_adjusted:.2g} over {self.family} challengers, "
            f"alpha {self.alpha:g}"
        )


@dataclass(frozen=True)
class Check:
    """The result of one rule: ``status`` is ``pass``, ``fail`` or ``unknown``; ``detail`` says why."""

    rule: str
    status: str
    detail: str
    observed: dict[str, Any] = field(default_factory=dict)


def improvement(direction: str, baseline: float, candidate: float) -> float:
    """How much better ``candidate`` is than ``baseline`` (negative: worse), per the metric's direction."""
    if direction == "higher":
        return candidate - baseline
    if direction == "lower":
        return baseline - candidate
    if direction == "target_1":
        return abs(baseline - 1.0) - abs(candidate - 1.0)
    raise PolicyError(f"metric direction {direction!r} cannot be compared; expected one of {DIRECTIONS}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _rows(evaluation: dict[str, Any]) -> int | None:
    rows = evaluation.get("rows")
    if rows is None:
        rows = (evaluation.get("data") or {}).get("rows")
    return int(rows) if isinstance(rows, (int, float)) else None


def check_rows(policy: DecisionPolicy, evaluation: dict[str, Any]) -> Check | None:
    if not policy.min_rows:
        return None
    rows = _rows(evaluation)
    if rows is None:
        return Check("min_rows", UNKNOWN, "the evaluation does not report its row count", {})
    status = PASS if rows >= policy.min_rows else UNKNOWN
    detail = f"evaluated on {rows} rows (policy needs at least {policy.min_rows})"
    return Check("min_rows", status, detail, {"rows": rows, "min_rows": policy.min_rows})


def check_primary(
    primary: PrimaryMetric, evaluation: dict[str, Any], challenger: str, significance: Significance
) -> Check:
    """The primary rule: a lift of at least ``min_lift``, significant after the correction.

    :param significance: the challenger's corrected test (see :func:`.decision.evaluate_policy`).
    """
    metric = primary.metric
    rule = f"primary:{metric}"
    direction = (evaluation.get("metric_directions") or {}).get(metric)
    stats = ((evaluation.get("deltas") or {}).get(challenger) or {}).get(metric) or {}
    delta, low, high = (_number(stats.get(k)) for k in ("delta", "ci_low", "ci_high"))
    if direction not in ("higher", "lower") or delta is None:
        why = "has no delta for the challenger" if delta is None else f"has direction {direction!r}"
        return Check(rule, UNKNOWN, f"primary metric {metric} {why}; pick a higher/lower-is-better metric")
    sign = 1.0 if direction == "higher" else -1.0
    lift = sign * delta
    observed: dict[str, Any] = {"lift": lift, "min_lift": primary.min_lift, "direction": direction}
    if not primary.require_ci_above_zero:
        status = PASS if lift >= primary.min_lift else FAIL
        verb = "meets" if status == PASS else "is below"
        return Check(
            rule, status, f"{metric} lift {lift:+.4f} {verb} the minimum {primary.min_lift:.4f}", observed
        )
    if low is None or high is None:
        return Check(rule, UNKNOWN, f"{metric} lift {lift:+.4f} has no confidence interval", observed)
    lift_low, lift_high = sorted((sign * low, sign * high))
    observed.update(
        ci_low=lift_low,
        ci_high=lift_high,
        p_value=significance.p_value,
        p_adjusted=significance.p_adjusted,
        alpha=significance.alpha,
        correction=significance.correction,
        significant=significance.significant,
    )
    ci = f"CI [{lift_low:+.4f}, {lift_high:+.4f}]"
    test = significance.describe()
    if lift >= primary.min_lift and significance.significant:
        return Check(
            rule,
            PASS,
            f"{metric} lift {lift:+.4f} >= {primary.min_lift:.4f}, {ci}, significant ({test})",
            observed,
        )
    if lift_high < primary.min_lift:
        detail = (
            f"{metric} lift {lift:+.4f}, {ci}: the whole interval is below the minimum {primary.min_lift:.4f}"
        )
        return Check(rule, FAIL, detail, observed)
    detail = (
        f"{metric} lift {lift:+.4f}, {ci}: not enough evidence for a lift of at least "
        f"{primary.min_lift:.4f} ({test})"
    )
    return Check(rule, UNKNOWN, detail, observed)


def check_guardrail(
    guard: Guardrail, evaluation: dict[str, Any], baseline: str, challenger: str, directions: dict[str, str]
) -> Check:
    metrics = evaluation.get("metrics") or {}
    base = _number((metrics.get(baseline) or {}).get(guard.metric))
    cand = _number((metrics.get(challenger) or {}).get(guard.metric))
    direction = directions.get(guard.metric)
    rule = f"guardrail:{guard.metric}"
    if base is None or cand is None or direction not in DIRECTIONS:
        why = f"direction {direction!r}" if base is not None and cand is not None else "a missing value"
        return Check(rule, UNKNOWN, f"guardrail {guard.metric} cannot be checked: {why}")
    regression = -improvement(direction, base, cand)
    observed = {
        baseline: base,
        challenger: cand,
        "regression": regression,
        "max_regression": guard.max_regression,
    }
    text = f"guardrail {guard.metric}: {baseline} {base:.4f} -> {challenger} {cand:.4f}"
    if regression > guard.max_regression:
        return Check(
            rule, FAIL, f"{text} regresses by {regression:.4f} > allowed {guard.max_regression:.4f}", observed
        )
    return Check(
        rule,
        PASS,
        f"{text} (regression {max(regression, 0.0) + 0.0:.4f} <= {guard.max_regression:.4f})",
        observed,
    )


def _slice_table(evaluation: dict[str, Any], metric: str, baseline: str, challenger: str) -> dict[str, dict]:
    """``{slice: {baseline: (rows, value), challenger: (rows, value)}}`` from the slices section."""
    table: dict[str, dict] = {}
    for row in (evaluation.get("slices") or {}).get("rows") or ():
        if row.get("model") in (baseline, challenger):
            table.setdefault(str(row.get("slice")), {})[row["model"]] = (
                row.get("rows") or 0,
                row.get(metric),
            )
    return table


def check_slices(
    policy: DecisionPolicy,
    evaluation: dict[str, Any],
    baseline: str,
    challenger: str,
    directions: dict[str, str],
) -> Check:
    rule_cfg = policy.slice_rule
    assert rule_cfg is not None
    metric = policy.slice_metric or policy.primary.metric
    rule = f"slices:{metric}"
    direction = directions.get(metric)
    table = _slice_table(evaluation, metric, baseline, challenger)
    if not table or direction not in DIRECTIONS:
        why = (
            "the evaluation has no per-slice metrics"
            if not table
            else f"{metric} has direction {direction!r}"
        )
        return Check(rule, UNKNOWN, f"slice rule cannot be checked: {why}")
    regressed: list[tuple[str, float]] = []
    compared = skipped = 0
    for name, models in sorted(table.items()):
        (rows_b, base), (rows_c, cand) = models.get(baseline, (0, None)), models.get(challenger, (0, None))
        base, cand = _number(base), _number(cand)
        if base is None or cand is None or min(rows_b, rows_c) < rule_cfg.min_rows:
            skipped += 1
            continue
        compared += 1
        regression = -improvement(direction, base, cand)
        if regression > rule_cfg.max_regression:
            regressed.append((name, regression))
    regressed.sort(key=lambda item: -item[1])
    observed = {
        "compared": compared,
        "skipped": skipped,
        "regressed": len(regressed),
        "worst": [{"slice": s, "regression": r} for s, r in regressed[:10]],
        "max_regressed_slices": rule_cfg.max_regressed_slices,
        "max_regression": rule_cfg.max_regression,
    }
    text = (
        f"{len(regressed)} of {compared} slices regress on {metric} "
        f"by more than {rule_cfg.max_regression:.4f} "
        f"(allowed: {rule_cfg.max_regressed_slices}; {skipped} skipped: too few rows or undefined metric)"
    )
    if compared == 0:
        return Check(rule, UNKNOWN, f"slice rule cannot be checked: no comparable slice; {text}", observed)
    if len(regressed) > rule_cfg.max_regressed_slices:
        worst = ", ".join(f"{s} ({-r:+.4f})" for s, r in regressed[:5])
        return Check(rule, FAIL, f"{text}; worst: {worst}", observed)
    return Check(rule, PASS, text, observed)
