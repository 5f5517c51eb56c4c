"""Many challengers against one champion: the correction, one winner at most, reasons for every one."""

from __future__ import annotations

import math

import pytest

from airflow_ray_provider.templates.champion_challenger.correction import adjust, p_value
from airflow_ray_provider.templates.champion_challenger.decision import (
    INCONCLUSIVE,
    KEEP_CHAMPION,
    PROMOTE,
    Decision,
    DecisionPolicy,
    Guardrail,
    PolicyError,
    PrimaryMetric,
    evaluate_policy,
)
from tests.fixtures.challengers import many_challengers_document, null_round

pytestmark = pytest.mark.unit

POLICY = DecisionPolicy(PrimaryMetric("roc_auc", min_lift=0.005), (Guardrail("log_loss", 0.01),))


def test_holm_and_bonferroni_adjust_as_the_textbook_says() -> None:
    p = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}
    # sorted d, a, c, b: 4*0.005, max(., 3*0.01), max(., 2*0.03), max(., 1*0.04)
    assert adjust(p, "holm") == pytest.approx({"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06})
    assert adjust(p, "bonferroni") == pytest.approx({"a": 0.04, "b": 0.16, "c": 0.12, "d": 0.02})
    assert adjust(p, "none") == p


def test_p_value_read_off_a_ci_matches_the_normal_approximation() -> None:
    # lift 0.02 with a symmetric 95% CI of half-width 0.0196: z = 2 -> one-sided p = 0.02275.
    stats = {"delta": 0.02, "ci_low": 0.02 - 0.0196, "ci_high": 0.02 + 0.0196}
    assert p_value(stats, "higher", 0.95) == pytest.approx(0.5 * math.erfc(2 / math.sqrt(2)), rel=1e-3)
    assert p_value({**stats, "p_value": 0.3}, "higher", 0.95) == 0.3  # the artifact's own wins
    assert p_value(stats, "lower", 0.95) == pytest.approx(1 - 0.02275, rel=1e-3)


def test_the_best_challenger_passing_every_check_wins_and_every_one_has_reasons() -> None:
    doc = many_challengers_document(
        {
            "big_but_lossy": {"roc_auc": (0.03, 0.02, 0.04), "log_loss": (0.05, 0.04, 0.06)},
            "good": {"roc_auc": (0.02, 0.015, 0.025)},
            "also_good": {"roc_auc": (0.015, 0.01, 0.02)},
            "worse": {"roc_auc": (-0.01, -0.015, -0.005)},
        }
    )
    decision = evaluate_policy(POLICY, doc)
    assert decision.outcome == PROMOTE and decision.winner == decision.challenger == "good"
    board = [c.name for c in decision.candidates]
    assert board == ["big_but_lossy", "good", "also_good", "worse"]  # best primary lift first
    verdicts = {c.name: c.outcome for c in decision.candidates}
    assert verdicts == {
        "big_but_lossy": KEEP_CHAMPION,
        "good": PROMOTE,
        "also_good": PROMOTE,
        "worse": KEEP_CHAMPION,
    }
    lossy = decision.candidates[0]
    assert lossy.status_of("guardrail:log_loss") == "fail" and lossy.reasons[0].startswith("[fail] guardrail")
    assert all(c.reasons for c in decision.candidates)
    assert any("Holm-adjusted" in r and "over 4 challengers" in r for r in decision.reasons)
    assert Decision.from_dict(decision.to_dict()) == decision


def test_a_lift_that_is_significant_alone_is_not_among_fifty() -> None:
    # One-sided p ~ 0.001 each: significant at 0.025 alone, not after correcting for 50 (needs 0.0005).
    half = 0.02 / 3.09 * 1.96
    doc = many_challengers_document(
        {f"m{i:02d}": {"roc_auc": (0.02, 0.02 - half, 0.02 + half)} for i in range(50)}
    )
    holm = evaluate_policy(POLICY, doc)
    assert holm.outcome == INCONCLUSIVE and holm.winner is None and len(holm.candidates) == 50
    assert all(not c.significant and c.p_adjusted == pytest.approx(50 * c.p_value) for c in holm.candidates)
    assert "over 50 challengers" in holm.reasons[0]
    alone = evaluate_policy(DecisionPolicy(POLICY.primary, POLICY.guardrails, correction="none"), doc)
    assert alone.outcome == PROMOTE and alone.winner == "m00"  # ties on lift: the first name wins
    one = many_challengers_document({"m00": {"roc_auc": (0.02, 0.02 - half, 0.02 + half)}})
    assert evaluate_policy(POLICY, one).outcome == PROMOTE  # Holm over one challenger: no correction


def test_correction_is_checked_and_travels_with_the_policy() -> None:
    policy = DecisionPolicy(PrimaryMetric("roc_auc"), correction="bonferroni", alpha=0.01)
    assert DecisionPolicy.from_dict(policy.to_dict()) == policy
    assert DecisionPolicy.from_dict({"primary": {"metric": "roc_auc"}}).correction == "holm"
    with pytest.raises(PolicyError, match="correction must be one of"):
        DecisionPolicy(PrimaryMetric("roc_auc"), correction="fdr")
    with pytest.raises(PolicyError, match="alpha"):
        DecisionPolicy(PrimaryMetric("roc_auc"), alpha=1.5)


def test_no_challenger_is_a_clear_error() -> None:
    doc = many_challengers_document({"only": {}})
    del doc["deltas"]["only"], doc["metrics"]["only"]
    with pytest.raises(PolicyError, match="no challenger"):
        evaluate_policy(POLICY, doc)


ROUNDS, ALPHA = 200, 0.025


def test_false_promotions_stay_at_the_nominal_rate_when_no_challenger_is_better() -> None:
    """200 seeded evaluations of 10 challengers drawn from the champion's distribution.

    Holm keeps "any challenger promoted" at or below alpha (the bound allows two binomial standard
    deviations of 200 rounds); judging each challenger alone promotes one far more often, which is
    what the correction is for (and shows this test can fail).
    """
    policy = {
        c: DecisionPolicy(PrimaryMetric("log_loss"), correction=c) for c in ("holm", "bonferroni", "none")
    }
    promoted = dict.fromkeys(policy, 0)
    for seed in range(ROUNDS):
        doc = null_round(seed)
        if seed == 0:  # the workload wrote a standard error and a one-sided p-value for each challenger
            stats = [d["log_loss"] for d in doc["deltas"].values()]
            assert len(stats) == 10 and all(s["se"] > 0 and 0 < s["p_value"] < 1 for s in stats)
        for name, rule in policy.items():
            promoted[name] += evaluate_policy(rule, doc).outcome == PROMOTE
    bound = ROUNDS * ALPHA + 2 * math.sqrt(ROUNDS * ALPHA * (1 - ALPHA))
    assert promoted["holm"] <= bound and promoted["bonferroni"] <= bound, promoted
    assert promoted["none"] >= 3 * max(promoted["holm"], 1), promoted
