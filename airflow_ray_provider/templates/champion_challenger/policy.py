"""The champion-vs-challenger decision policy, kept as data (build it in code or from a dict/YAML).

A policy has three kinds of rule:

* **primary metric**: the challenger must beat the champion by at least ``min_lift`` and, by default, be
  significantly better: its one-sided bootstrap p-value, corrected for the number of challengers
  (``correction``: Holm-Bonferroni by default, see :mod:`.correction`), at most ``alpha``;
* **guardrails**: other metrics may regress by at most ``max_regression`` each;
* **slice rule**: at most ``max_regressed_slices`` slices (e.g. zones) may regress by more than
  ``max_regression`` on the slice metric.

This module imports nothing heavy; it runs in the Airflow worker.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, TypeVar

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.templates.champion_challenger.correction import CORRECTIONS


class PolicyError(RayInvalidInputError):
    """The champion-vs-challenger decision policy is malformed; the message says which field to fix."""


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
    :param correction: multiple-comparison correction of the primary metric's significance over all
        challengers: ``holm`` (default), ``bonferroni`` or ``none`` (see :mod:`.correction`).
    :param alpha: family-wise error rate of the primary test (``None``: the one-sided level of the
        evaluation's CI, ``(1 - confidence) / 2``, i.e. 0.025 for a 95 % interval).
    """

    primary: PrimaryMetric
    guardrails: tuple[Guardrail, ...] = ()
    slice_rule: SliceRule | None = None
    min_rows: int = 0
    correction: str = "holm"
    alpha: float | None = None

    def __post_init__(self) -> None:
        if not self.primary.metric:
            raise PolicyError("policy.primary.metric is empty; name a metric such as 'roc_auc'")
        if self.correction not in CORRECTIONS:
            raise PolicyError(
                f"policy correction must be one of {list(CORRECTIONS)}, got {self.correction!r}: holm "
                "(Holm-Bonferroni, the default), bonferroni, or none (judge each challenger alone)"
            )
        if self.alpha is not None and not (
            isinstance(self.alpha, (int, float)) and not isinstance(self.alpha, bool) and 0 < self.alpha < 1
        ):
            raise PolicyError(
                f"policy alpha must be a number between 0 and 1 (e.g. 0.025), got {self.alpha!r}"
            )
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
        _check_keys(data, {f.name for f in fields(cls)}, "policy")
        try:
            primary = _build(PrimaryMetric, data["primary"], "primary")
            guardrails = tuple(_build(Guardrail, g, "guardrails[]") for g in data.get("guardrails") or ())
            raw_rule = data.get("slice_rule")
            slice_rule = _build(SliceRule, raw_rule, "slice_rule") if raw_rule is not None else None
        except TypeError as exc:
            raise PolicyError(f"decision policy: {exc}") from exc
        return cls(
            primary,
            guardrails,
            slice_rule,
            int(data.get("min_rows", 0)),
            correction=str(data.get("correction", "holm")),
            alpha=data.get("alpha"),
        )


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
