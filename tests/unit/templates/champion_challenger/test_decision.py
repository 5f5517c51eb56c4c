"""The champion-vs-challenger decision policy: promote, keep, inconclusive, guardrails, slices."""

from __future__ import annotations

import pytest

from airflow_ray_provider.templates.champion_challenger.decision import (
    INCONCLUSIVE,
    KEEP_CHAMPION,
    PROMOTE,
    Decision,
    DecisionPolicy,
    Guardrail,
    PolicyError,
    PrimaryMetric,
    SliceRule,
    evaluate_policy,
)
from tests.fixtures.templates import metrics_document

pytestmark = pytest.mark.unit

POLICY = DecisionPolicy(
    primary=PrimaryMetric("roc_auc", min_lift=0.005),
    guardrails=(Guardrail("log_loss", 0.01), Guardrail("calibration_ratio", 0.05)),
    slice_rule=SliceRule(max_regression=0.03, max_regressed_slices=1, min_rows=100),
)
GOOD_SLICES = {f"zone=z{i}": 0.01 for i in range(6)}


def _doc(**kwargs):
    kwargs.setdefault("slice_deltas", GOOD_SLICES)
    return metrics_document(**kwargs)


def test_promote_when_every_rule_passes() -> None:
    decision = evaluate_policy(POLICY, _doc(lifts={"roc_auc": (0.02, 0.01, 0.03)}))
    assert decision.outcome == PROMOTE
    assert decision.challenger == "challenger" and decision.baseline == "champion"
    assert {c.rule for c in decision.checks} == {
        "primary:roc_auc", "guardrail:log_loss", "guardrail:calibration_ratio", "slices:roc_auc",
    }  # fmt: skip
    assert all(c.status == "pass" for c in decision.checks)


def test_keep_champion_when_the_whole_interval_is_below_the_minimum_lift() -> None:
    decision = evaluate_policy(POLICY, _doc(lifts={"roc_auc": (0.001, -0.002, 0.004)}))
    assert decision.outcome == KEEP_CHAMPION
    primary = next(c for c in decision.checks if c.rule == "primary:roc_auc")
    assert primary.status == "fail" and "below the minimum" in primary.detail


def test_keep_champion_when_the_challenger_is_clearly_worse() -> None:
    decision = evaluate_policy(POLICY, _doc(lifts={"roc_auc": (-0.02, -0.03, -0.01)}))
    assert decision.outcome == KEEP_CHAMPION


def test_inconclusive_when_the_interval_straddles_zero() -> None:
    decision = evaluate_policy(POLICY, _doc(lifts={"roc_auc": (0.01, -0.004, 0.024)}))
    assert decision.outcome == INCONCLUSIVE
    assert decision.reasons[0].startswith("[unknown]") and "not enough evidence" in decision.reasons[0]


def test_ci_requirement_can_be_switched_off() -> None:
    policy = DecisionPolicy(PrimaryMetric("roc_auc", 0.005, require_ci_above_zero=False))
    assert evaluate_policy(policy, _doc(lifts={"roc_auc": (0.01, -0.004, 0.024)})).outcome == PROMOTE
    assert evaluate_policy(policy, _doc(lifts={"roc_auc": (0.004, 0.003, 0.005)})).outcome == KEEP_CHAMPION


def test_guardrail_breach_keeps_the_champion_and_says_which() -> None:
    doc = _doc(lifts={"roc_auc": (0.02, 0.01, 0.03), "log_loss": (0.02, 0.015, 0.025)})
    decision = evaluate_policy(POLICY, doc)
    assert decision.outcome == KEEP_CHAMPION
    failed = [c for c in decision.checks if c.status == "fail"]
    assert [c.rule for c in failed] == ["guardrail:log_loss"]
    assert "regresses by 0.0200 > allowed 0.0100" in failed[0].detail
    assert decision.reasons[0].startswith("[fail] guardrail log_loss")


def test_target_1_guardrail_measures_distance_from_one() -> None:
    # champion ratio 1.02; challenger 1.10 is 0.08 further from 1 (> 0.05), 0.96 is closer: fine.
    worse = evaluate_policy(
        POLICY, _doc(lifts={"roc_auc": (0.02, 0.01, 0.03), "calibration_ratio": (0.08, 0, 0)})
    )
    better = evaluate_policy(
        POLICY, _doc(lifts={"roc_auc": (0.02, 0.01, 0.03), "calibration_ratio": (-0.06, 0, 0)})
    )
    assert worse.outcome == KEEP_CHAMPION and better.outcome == PROMOTE


def test_slice_rule_counts_regressed_slices() -> None:
    slices = {**GOOD_SLICES, "zone=bad1": -0.05, "zone=bad2": -0.04, "zone=mild": -0.025}
    doc = _doc(lifts={"roc_auc": (0.02, 0.01, 0.03)}, slice_deltas=slices)
    decision = evaluate_policy(POLICY, doc)
    assert decision.outcome == KEEP_CHAMPION
    check = next(c for c in decision.checks if c.rule == "slices:roc_auc")
    assert check.observed["regressed"] == 2 and check.observed["compared"] == 9
    assert "zone=bad1 (-0.0500)" in check.detail
    lenient = DecisionPolicy(
        POLICY.primary, POLICY.guardrails, SliceRule(max_regression=0.03, max_regressed_slices=2)
    )
    assert evaluate_policy(lenient, doc).outcome == PROMOTE


def test_slice_rule_skips_small_slices_and_undefined_metrics() -> None:
    doc = _doc(lifts={"roc_auc": (0.02, 0.01, 0.03)}, slice_deltas={"zone=a": -0.2, "zone=b": 0.01})
    for row in doc["slices"]["rows"]:
        if row["slice"] == "zone=a":
            row["roc_auc"] = None  # one class only: AUC undefined
    decision = evaluate_policy(POLICY, doc)
    check = next(c for c in decision.checks if c.rule == "slices:roc_auc")
    assert check.status == "pass" and check.observed["skipped"] == 1


def test_missing_primary_metric_is_inconclusive() -> None:
    doc = _doc()
    del doc["deltas"]["challenger"]["roc_auc"]
    decision = evaluate_policy(POLICY, doc)
    assert decision.outcome == INCONCLUSIVE
    assert "no delta" in decision.reasons[0]


def test_lower_is_better_primary_metric() -> None:
    policy = DecisionPolicy(PrimaryMetric("log_loss", 0.005))
    assert evaluate_policy(policy, _doc(lifts={"log_loss": (-0.02, -0.03, -0.01)})).outcome == PROMOTE
    assert evaluate_policy(policy, _doc(lifts={"log_loss": (0.02, 0.01, 0.03)})).outcome == KEEP_CHAMPION


def test_too_few_rows_is_inconclusive() -> None:
    policy = DecisionPolicy(PrimaryMetric("roc_auc", 0.005), min_rows=50_000)
    decision = evaluate_policy(policy, _doc(lifts={"roc_auc": (0.02, 0.01, 0.03)}, rows=1000))
    assert decision.outcome == INCONCLUSIVE and "1000 rows" in decision.reasons[0]


def test_policy_round_trips_through_plain_data_and_rejects_typos() -> None:
    assert DecisionPolicy.from_dict(POLICY.to_dict()) == POLICY
    with pytest.raises(PolicyError, match="unknown keys"):
        DecisionPolicy.from_dict({"primary": {"metric": "roc_auc", "min_lfit": 0.01}})
    with pytest.raises(PolicyError, match="'primary'"):
        DecisionPolicy.from_dict({"guardrails": []})
    with pytest.raises(PolicyError, match=">= 0"):
        DecisionPolicy(PrimaryMetric("roc_auc", -0.1))
    with pytest.raises(PolicyError, match="twice"):
        DecisionPolicy(PrimaryMetric("roc_auc"), (Guardrail("log_loss", 0.1), Guardrail("log_loss", 0.2)))


def test_decision_round_trips_through_xcom_shape() -> None:
    decision = evaluate_policy(POLICY, _doc(lifts={"roc_auc": (0.02, 0.01, 0.03)}))
    data = decision.to_dict()
    assert data["outcome"] == PROMOTE and len(data["reasons"]) == len(data["checks"]) == 4
    assert Decision.from_dict(data) == decision


def test_a_named_challenger_is_judged_alone_and_must_exist() -> None:
    doc = _doc(lifts={"roc_auc": (0.02, 0.01, 0.03)})
    doc["deltas"]["challenger_b"] = doc["deltas"]["challenger"]
    assert evaluate_policy(POLICY, doc, challenger="challenger_b").challenger == "challenger_b"
    with pytest.raises(PolicyError, match="'nope' is not in the evaluation"):
        evaluate_policy(POLICY, doc, challenger="nope")
