"""Champion-vs-challenger decision policy, kept as data, and the pure function that applies it.

A policy has three kinds of rule:

* **primary metric**: the challenger must beat the champion by at least ``min_lift`` and, by default, the
  lower bound of the bootstrap confidence interval of that lift must be above zero;
* **guardrails**: other metrics may regress by at most ``max_regression`` each;
* **slice rule**: at most ``max_regressed_slices`` slices (e.g. zones) may regress by more than
  ``max_regression`` on the slice metric.

Every rule yields a :class:`Check` with status ``pass``, ``fail`` or ``unknown``. The outcome is
``keep_champion`` when any check fails, ``inconclusive`` when none fails but one cannot be decided (the
confidence interval straddles the bar, a metric is missing), and ``promote`` when all pass.

"Better" follows the direction the evaluation artifact records per metric (``metric_directions``):
``higher`` (accuracy, roc_auc, ndcg@k), ``lower`` (log_loss, calibration_error) or ``target_1``
(calibration_ratio: closer to 1 is better). Lifts and regressions are absolute differences in the
metric's own unit. This module imports nothing heavy; it runs in the Airflow worker.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

from airflow_ray_provider.exceptions import PolicyError

PROMOTE = "promote"
KEEP_CHAMPION = "keep_champion"
INCONCLUSIVE = "inconclusive"
OUTCOMES = (PROMOTE, KEEP_CHAMPION, INCONCLUSIVE)

PASS, FAIL, UNKNOWN = "pass", "fail", "unknown"
_DIRECTIONS = ("higher", "lower", "target_1")


@dataclass(frozen=True)
class PrimaryMetric:
    """The metric the challenger must improve.

    :param metric: metric name as written in ``metrics.json`` (e.g. ``"roc_auc"``, ``"ndcg@10"``).
    :param min_lift: smallest improvement that counts, in the metric's unit (``0.005`` = half a point of AUC).
    :param require_ci_above_zero: also require the lower bound of the lift's bootstrap CI to be above zero.
    """

    metric: str
    min_lift: float = 0.0
    require_ci_above_zero: bool = True


@dataclass(frozen=True)
class Guardrail:
    """A metric that must not get worse by more than ``max_regression`` (absolute, metric units)."""

    metric: str
    max_regression: float


@dataclass(frozen=True)
class SliceRule:
    """At most ``max_regressed_slices`` slices may regress by more than ``max_regression``.

    :param metric: slice metric; ``None`` uses the primary metric.
    :param max_regression: regression (absolute, metric units) above which a slice counts as regressed.
    :param max_regressed_slices: how many regressed slices are tolerated.
    :param min_rows: ignore slices with fewer rows than this (their metrics are noise).
    """

    metric: str | None = None
    max_regression: float = 0.0
    max_regressed_slices: int = 0
    min_rows: int = 0


@dataclass(frozen=True)
class DecisionPolicy:
    """When a challenger replaces the champion. Plain data: build it in code or from a dict/YAML.

    :param primary: the metric to improve.
    :param guardrails: metrics that must not regress beyond their limit.
    :param slice_rule: optional per-slice regression rule.
    :param min_rows: evaluations on fewer rows than this are inconclusive.
    """

    primary: PrimaryMetric
    guardrails: tuple[Guardrail, ...] = ()
    slice_rule: SliceRule | None = None
    min_rows: int = 0

    def __post_init__(self) -> None:
        if not self.primary.metric:
            raise PolicyError("policy.primary.metric is empty; name a metric such as 'roc_auc'")
        for name, value in self._numbers():
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
                raise PolicyError(f"policy {name} must be a finite number, got {value!r}")
            if value < 0:
                raise PolicyError(f"policy {name} must be >= 0, got {value!r}")
        seen = [g.metric for g in self.guardrails]
        if len(seen) != len(set(seen)):
            raise PolicyError(f"policy guardrails name a metric twice: {seen}")

    def _numbers(self) -> list[tuple[str, Any]]:
        nums: list[tuple[str, Any]] = [
            ("primary.min_lift", self.primary.min_lift),
            ("min_rows", self.min_rows),
        ]
        nums += [(f"guardrail {g.metric!r} max_regression", g.max_regression) for g in self.guardrails]
        if self.slice_rule is not None:
            rule = self.slice_rule
            nums += [
                ("slice_rule.max_regression", rule.max_regression),
                ("slice_rule.max_regressed_slices", rule.max_regressed_slices),
                ("slice_rule.min_rows", rule.min_rows),
            ]
        return nums

    @property
    def metrics(self) -> list[str]:
        """Every metric the policy reads (primary first)."""
        names = [self.primary.metric, *(g.metric for g in self.guardrails)]
        if self.slice_rule is not None and self.slice_rule.metric:
            names.append(self.slice_rule.metric)
        return list(dict.fromkeys(names))

    @property
    def slice_metric(self) -> str | None:
        """The metric the slice rule compares, or ``None`` without a slice rule."""
        if self.slice_rule is None:
            return None
        return self.slice_rule.metric or self.primary.metric

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (the inverse of :meth:`from_dict`)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DecisionPolicy:
        """Build a policy from plain data (e.g. parsed YAML).

        :raises PolicyError: on unknown keys or missing fields.
        """
        if not isinstance(data, dict) or "primary" not in data:
            raise PolicyError("a decision policy needs a 'primary' section: {'primary': {'metric': ...}}")
        _check_keys(data, {"primary", "guardrails", "slice_rule", "min_rows"}, "policy")
        try:
            primary = _build(PrimaryMetric, data["primary"], "primary")
            guardrails = tuple(_build(Guardrail, g, "guardrails[]") for g in data.get("guardrails") or ())
            raw_rule = data.get("slice_rule")
            slice_rule = _build(SliceRule, raw_rule, "slice_rule") if raw_rule is not None else None
        except TypeError as exc:
            raise PolicyError(f"decision policy: {exc}") from exc
        return cls(primary, guardrails, slice_rule, int(data.get("min_rows", 0)))


def _check_keys(data: dict[str, Any], allowed: set[str], where: str) -> None:
    unknown = set(data) - allowed
    if unknown:
        raise PolicyError(f"{where} has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")


_Rule = TypeVar("_Rule", PrimaryMetric, Guardrail, SliceRule)


def _build(kind: type[_Rule], data: Any, where: str) -> _Rule:
    if not isinstance(data, dict):
        raise PolicyError(f"policy {where} must be a mapping, got {type(data).__name__}")
    _check_keys(data, {f.name for f in fields(kind)}, f"policy {where}")
    return kind(**data)


@dataclass(frozen=True)
class Check:
    """The result of one rule: ``status`` is ``pass``, ``fail`` or ``unknown``; ``detail`` says why."""

    rule: str
    status: str
    detail: str
    observed: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Decision:
    """The outcome of a policy on one evaluation, with every check behind it."""

    outcome: str
    baseline: str
    challenger: str
    primary_metric: str
    checks: tuple[Check, ...]

    @property
    def reasons(self) -> list[str]:
        """Every check's statement, failures first, then undecided checks, then passes."""
        order = {FAIL: 0, UNKNOWN: 1, PASS: 2}
        ranked = sorted(self.checks, key=lambda c: order[c.status])
        return [f"[{c.status}] {c.detail}" for c in ranked]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict for XCom (includes ``reasons``)."""
        data = asdict(self)
        data["checks"] = [asdict(c) for c in self.checks]
        data["reasons"] = self.reasons
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        """Rebuild a decision from :meth:`to_dict` output (e.g. an XCom value)."""
        checks = tuple(Check(**c) for c in data["checks"])
        return cls(data["outcome"], data["baseline"], data["challenger"], data["primary_metric"], checks)


def improvement(direction: str, baseline: float, candidate: float) -> float:
    """How much better ``candidate`` is than ``baseline`` (negative: worse), per the metric's direction."""
    if direction == "higher":
        return candidate - baseline
    if direction == "lower":
        return baseline - candidate
    if direction == "target_1":
        return abs(baseline - 1.0) - abs(candidate - 1.0)
    raise PolicyError(f"metric direction {direction!r} cannot be compared; expected one of {_DIRECTIONS}")


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def evaluate_policy(
    policy: DecisionPolicy, evaluation: dict[str, Any], *, challenger: str | None = None
) -> Decision:
    """Apply ``policy`` to one evaluation. Pure: no I/O, same input, same decision.

    :param policy: the decision policy.
    :param evaluation: the ``metrics.json`` document or the summary :class:`CollectRayMetricsOperator`
        pushes (both carry ``baseline``, ``metric_directions``, ``metrics``, ``deltas`` and ``slices``).
    :param challenger: the model to judge; defaults to the only non-baseline model.
    :raises PolicyError: when the challenger cannot be identified.
    """
    baseline = evaluation.get("baseline") or "champion"
    challenger = challenger or _only_challenger(evaluation, baseline)
    directions = evaluation.get("metric_directions") or {}
    rows = _check_rows(policy, evaluation)
    checks: list[Check] = [] if rows is None else [rows]
    checks.append(_check_primary(policy.primary, evaluation, challenger))
    checks += [_check_guardrail(g, evaluation, baseline, challenger, directions) for g in policy.guardrails]
    if policy.slice_rule is not None:
        checks.append(_check_slices(policy, evaluation, baseline, challenger, directions))
    statuses = {c.status for c in checks}
    outcome = KEEP_CHAMPION if FAIL in statuses else INCONCLUSIVE if UNKNOWN in statuses else PROMOTE
    return Decision(outcome, baseline, challenger, policy.primary.metric, tuple(checks))


def _only_challenger(evaluation: dict[str, Any], baseline: str) -> str:
    names = [m for m in (evaluation.get("deltas") or {}) if m != baseline]
    names = names or [m for m in (evaluation.get("metrics") or {}) if m != baseline]
    if len(names) != 1:
        raise PolicyError(
            f"cannot tell which model is the challenger among {names}; pass challenger=<model name>"
        )
    return names[0]


def _rows(evaluation: dict[str, Any]) -> int | None:
    rows = evaluation.get("rows")
    if rows is None:
        rows = (evaluation.get("data") or {}).get("rows")
    return int(rows) if isinstance(rows, (int, float)) else None


def _check_rows(policy: DecisionPolicy, evaluation: dict[str, Any]) -> Check | None:
    if not policy.min_rows:
        return None
    rows = _rows(evaluation)
    if rows is None:
        return Check("min_rows", UNKNOWN, "the evaluation does not report its row count", {})
    status = PASS if rows >= policy.min_rows else UNKNOWN
    detail = f"evaluated on {rows} rows (policy needs at least {policy.min_rows})"
    return Check("min_rows", status, detail, {"rows": rows, "min_rows": policy.min_rows})


def _check_primary(primary: PrimaryMetric, evaluation: dict[str, Any], challenger: str) -> Check:
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
    observed = {"lift": lift, "min_lift": primary.min_lift, "direction": direction}
    if not primary.require_ci_above_zero:
        status = PASS if lift >= primary.min_lift else FAIL
        verb = "meets" if status == PASS else "is below"
        return Check(
            rule, status, f"{metric} lift {lift:+.4f} {verb} the minimum {primary.min_lift:.4f}", observed
        )
    if low is None or high is None:
        return Check(rule, UNKNOWN, f"{metric} lift {lift:+.4f} has no confidence interval", observed)
    lift_low, lift_high = sorted((sign * low, sign * high))
    observed.update(ci_low=lift_low, ci_high=lift_high)
    ci = f"95% CI [{lift_low:+.4f}, {lift_high:+.4f}]"
    if lift >= primary.min_lift and lift_low > 0:
        return Check(
            rule, PASS, f"{metric} lift {lift:+.4f} >= {primary.min_lift:.4f} and {ci} above 0", observed
        )
    if lift_high < primary.min_lift:
        detail = (
            f"{metric} lift {lift:+.4f}, {ci}: the whole interval is below the minimum {primary.min_lift:.4f}"
        )
        return Check(rule, FAIL, detail, observed)
    detail = (
        f"{metric} lift {lift:+.4f}, {ci}: not enough evidence for a lift of at least "
        f"{primary.min_lift:.4f} with the lower bound above 0"
    )
    return Check(rule, UNKNOWN, detail, observed)


def _check_guardrail(
    guard: Guardrail, evaluation: dict[str, Any], baseline: str, challenger: str, directions: dict[str, str]
) -> Check:
    metrics = evaluation.get("metrics") or {}
    base = _number((metrics.get(baseline) or {}).get(guard.metric))
    cand = _number((metrics.get(challenger) or {}).get(guard.metric))
    direction = directions.get(guard.metric)
    rule = f"guardrail:{guard.metric}"
    if base is None or cand is None or direction not in _DIRECTIONS:
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


def _check_slices(
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
    if not table or direction not in _DIRECTIONS:
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
        "compared": compared, "skipped": skipped, "regressed": len(regressed),
        "worst": [{"slice": s, "regression": r} for s, r in regressed[:10]],
        "max_regressed_slices": rule_cfg.max_regressed_slices, "max_regression": rule_cfg.max_regression,
    }  # fmt: skip
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
