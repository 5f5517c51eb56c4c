"""Champion against one or many challengers: the pure function that applies a decision policy.

Each challenger is judged by every rule of the policy (:mod:`.checks`): its outcome is ``keep_champion``
when a check fails, ``inconclusive`` when none fails but one cannot be decided (the lift is not
significant after the correction, a metric is missing), and ``promote`` when all pass. The primary
metric's significance is corrected over all challengers of the evaluation (:mod:`.correction`:
Holm-Bonferroni by default), so that "the best of 50" is not promoted by chance.

At most one challenger is promoted: the best on the primary metric among those that pass every check.
The run's outcome is ``promote`` when there is such a winner, else ``inconclusive`` when some challenger
failed no check, else ``keep_champion``; every challenger keeps its own checks and reasons (the
leaderboard of the report). This module imports nothing heavy; it runs in the Airflow worker.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from airflow_ray_provider.templates.champion_challenger.checks import (
    FAIL,
    PASS,
    UNKNOWN,
    Check,
    Significance,
    check_guardrail,
    check_primary,
    check_rows,
    check_slices,
    improvement,
)
from airflow_ray_provider.templates.champion_challenger.correction import adjust, default_alpha, p_value
from airflow_ray_provider.templates.champion_challenger.policy import (
    DecisionPolicy,
    Guardrail,
    PolicyError,
    PrimaryMetric,
    SliceRule,
)

__all__ = [
    "FAIL",
    "INCONCLUSIVE",
    "KEEP_CHAMPION",
    "OUTCOMES",
    "PASS",
    "PROMOTE",
    "UNKNOWN",
    "Candidate",
    "Check",
    "Decision",
    "DecisionPolicy",
    "Guardrail",
    "PolicyError",
    "PrimaryMetric",
    "SliceRule",
    "evaluate_policy",
    "improvement",
]

PROMOTE = "promote"
KEEP_CHAMPION = "keep_champion"
INCONCLUSIVE = "inconclusive"
OUTCOMES = (PROMOTE, KEEP_CHAMPION, INCONCLUSIVE)
_ORDER = {FAIL: 0, UNKNOWN: 1, PASS: 2}


def _reasons(checks: tuple[Check, ...]) -> list[str]:
    return [f"[{c.status}] {c.detail}" for c in sorted(checks, key=lambda c: _ORDER[c.status])]


def _outcome(checks: tuple[Check, ...]) -> str:
    statuses = {c.status for c in checks}
    return KEEP_CHAMPION if FAIL in statuses else INCONCLUSIVE if UNKNOWN in statuses else PROMOTE


@dataclass(frozen=True)
class Candidate:
    """One challenger's verdict: its outcome, the primary lift and test, and every check.

    :param lift: improvement on the primary metric (metric units, positive = better; ``None``: missing).
    :param p_value: one-sided p-value of the primary lift; :param p_adjusted: after the correction.
    :param significant: whether the corrected test says it is better than the champion.
    """

    name: str
    outcome: str
    lift: float | None
    p_value: float | None
    p_adjusted: float | None
    significant: bool
    checks: tuple[Check, ...]

    @property
    def reasons(self) -> list[str]:
        """Every check's statement, failures first, then undecided checks, then passes."""
        return _reasons(self.checks)

    def status_of(self, rule: str) -> str | None:
        """The status of the check named ``rule`` (``None``: the policy has no such rule)."""
        return next((c.status for c in self.checks if c.rule == rule), None)


@dataclass(frozen=True)
class Decision:
    """The outcome of a policy on one evaluation, with every check behind it.

    :param challenger: the winner when one is promoted, else the best-ranked challenger (whose checks
        ``checks`` are, for the one-challenger view of the report and the log).
    :param candidates: every challenger, best on the primary metric first (the leaderboard).
    :param winner: the promoted challenger (``None``: the champion stays).
    :param correction: the multiple-comparison correction used; :param alpha: its family-wise level.
    """

    outcome: str
    baseline: str
    challenger: str
    primary_metric: str
    checks: tuple[Check, ...]
    candidates: tuple[Candidate, ...] = ()
    winner: str | None = None
    correction: str = "holm"
    alpha: float | None = None

    @property
    def reasons(self) -> list[str]:
        """Every check's statement (of ``challenger``), failures first, then undecided, then passes."""
        return _reasons(self.checks)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict for XCom (includes ``reasons``, also per candidate)."""
        data = asdict(self)
        data["checks"] = [asdict(c) for c in self.checks]
        data["reasons"] = self.reasons
        data["candidates"] = [
            {**asdict(c), "checks": [asdict(k) for k in c.checks], "reasons": c.reasons}
            for c in self.candidates
        ]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Decision:
        """Rebuild a decision from :meth:`to_dict` output (e.g. an XCom value)."""
        candidates = tuple(
            Candidate(
                **{k: v for k, v in c.items() if k not in ("checks", "reasons")},
                checks=tuple(Check(**k) for k in c["checks"]),
            )
            for c in data.get("candidates") or ()
        )
        return cls(
            data["outcome"],
            data["baseline"],
            data["challenger"],
            data["primary_metric"],
            tuple(Check(**c) for c in data["checks"]),
            candidates,
            data.get("winner"),
            data.get("correction", "holm"),
            data.get("alpha"),
        )


def challengers_of(evaluation: dict[str, Any]) -> list[str]:
    """Every model of the evaluation other than the baseline, in the artifact's order."""
    baseline = evaluation.get("baseline") or "champion"
    names = [m for m in (evaluation.get("deltas") or {}) if m != baseline]
    return names or [m for m in (evaluation.get("metrics") or {}) if m != baseline]


def significance_of(
    policy: DecisionPolicy, evaluation: dict[str, Any], names: list[str]
) -> dict[str, Significance]:
    """The primary metric's test for each challenger, corrected over every challenger with a p-value."""
    metric = policy.primary.metric
    direction = (evaluation.get("metric_directions") or {}).get(metric) or ""
    confidence = float((evaluation.get("bootstrap") or {}).get("confidence") or 0.95)
    deltas = evaluation.get("deltas") or {}
    raw = {n: p_value((deltas.get(n) or {}).get(metric) or {}, direction, confidence) for n in names}
    family = {n: p for n, p in raw.items() if p is not None}
    adjusted = adjust(family, policy.correction)
    alpha = policy.alpha if policy.alpha is not None else default_alpha(evaluation)
    return {n: Significance(raw[n], adjusted.get(n), alpha, policy.correction, len(family)) for n in names}


def judge(
    policy: DecisionPolicy, evaluation: dict[str, Any], challenger: str, significance: Significance
) -> Candidate:
    """Apply every rule of ``policy`` to one challenger."""
    baseline = evaluation.get("baseline") or "champion"
    directions = evaluation.get("metric_directions") or {}
    rows = check_rows(policy, evaluation)
    checks: list[Check] = [] if rows is None else [rows]
    primary = check_primary(policy.primary, evaluation, challenger, significance)
    checks.append(primary)
    checks += [check_guardrail(g, evaluation, baseline, challenger, directions) for g in policy.guardrails]
    if policy.slice_rule is not None:
        checks.append(check_slices(policy, evaluation, baseline, challenger, directions))
    lift = primary.observed.get("lift")
    return Candidate(
        challenger,
        _outcome(tuple(checks)),
        lift,
        significance.p_value,
        significance.p_adjusted,
        significance.significant,
        tuple(checks),
    )


def evaluate_policy(
    policy: DecisionPolicy, evaluation: dict[str, Any], *, challenger: str | None = None
) -> Decision:
    """Apply ``policy`` to one evaluation of a champion and any number of challengers. Pure.

    :param policy: the decision policy.
    :param evaluation: the ``metrics.json`` document or the summary :class:`CollectRayMetricsOperator`
        pushes (both carry ``baseline``, ``metric_directions``, ``metrics``, ``deltas`` and ``slices``).
    :param challenger: judge only this model (the correction still counts every challenger); default:
        every challenger, promoting at most one.
    :raises PolicyError: when the evaluation has no challenger, or ``challenger`` is not one of them.
    """
    baseline = evaluation.get("baseline") or "champion"
    names = challengers_of(evaluation)
    if not names:
        raise PolicyError(f"the evaluation has no challenger: every model in it is the baseline {baseline!r}")
    if challenger is not None and challenger not in names:
        raise PolicyError(f"challenger {challenger!r} is not in the evaluation; its challengers: {names}")
    tests = significance_of(policy, evaluation, names)
    judged = [judge(policy, evaluation, n, tests[n]) for n in ([challenger] if challenger else names)]
    board = tuple(sorted(judged, key=lambda c: (c.lift is None, -(c.lift or 0.0), c.name)))
    promotable = [c for c in board if c.outcome == PROMOTE]
    winner = promotable[0] if promotable else None
    if winner is not None:
        outcome = PROMOTE
    else:
        outcome = INCONCLUSIVE if any(c.outcome == INCONCLUSIVE for c in board) else KEEP_CHAMPION
    shown = winner or next((c for c in board if c.outcome == INCONCLUSIVE), board[0])
    alpha = policy.alpha if policy.alpha is not None else default_alpha(evaluation)
    return Decision(
        outcome,
        baseline,
        shown.name,
        policy.primary.metric,
        shown.checks,
        board,
        winner.name if winner else None,
        policy.correction,
        alpha,
    )
