"""Nightly champion-vs-challenger validation: the DAG factory and the decision policy it applies."""

from airflow_ray_provider.templates.champion_challenger.decision import (
    Candidate,
    Decision,
    DecisionPolicy,
    Guardrail,
    PolicyError,
    PrimaryMetric,
    SliceRule,
    evaluate_policy,
)
from airflow_ray_provider.templates.champion_challenger.factory import build_champion_challenger_dag

__all__ = [
    "Candidate",
    "Decision",
    "DecisionPolicy",
    "Guardrail",
    "PolicyError",
    "PrimaryMetric",
    "SliceRule",
    "build_champion_challenger_dag",
    "evaluate_policy",
]
