"""The TaskFlow steps of the champion-vs-challenger template: decide, report, branch, promote, keep.

They run in the Airflow worker and only read the collector's XCom summary (no Ray, no data). Arguments
that come from an upstream task are annotated ``XComArg | <value>``: the factory passes the upstream
output, the step receives its value (:func:`~airflow_ray_provider.templates.common.resolved`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow.sdk import task

from airflow_ray_provider.templates.champion_challenger.decision import (
    PROMOTE,
    Decision,
    DecisionPolicy,
    evaluate_policy,
)
from airflow_ray_provider.templates.common import resolved

if TYPE_CHECKING:
    from airflow.sdk import Asset, XComArg

log = logging.getLogger(__name__)

#: ``on_promote(decision, context)``: ``decision`` is the decide task's dict (``outcome``, ``winner``,
#: ``reasons``, ``checks``, ``candidates``, ``champion_uri``, ``challenger_uri`` (the winner's),
#: ``report``); the return value is logged.
PromoteCallable = Callable[[dict[str, Any], Any], Any]


def _model_uris(summary: dict[str, Any], decision: Decision) -> dict[str, Any]:
    models = summary.get("models") or {}
    return {
        "champion_uri": (models.get(decision.baseline) or {}).get("uri"),
        "challenger_uri": (models.get(decision.challenger) or {}).get("uri"),
        "challenger_sha256": (models.get(decision.challenger) or {}).get("sha256"),
        "artifact_uri": summary.get("artifact_uri"),
    }


@task(task_id="decide")
def decide(summary: XComArg | dict[str, Any], policy: dict[str, Any]) -> dict[str, Any]:
    """Apply the policy to the collected metrics; the XCom is the decision with every reason."""
    summary = resolved(summary)
    decision = evaluate_policy(DecisionPolicy.from_dict(policy), summary)
    log.info(
        "Decision: %s (winner %s of %d challengers)",
        decision.outcome,
        decision.winner,
        len(decision.candidates),
    )
    for reason in decision.reasons:
        log.info("  %s", reason)
    return {**decision.to_dict(), **_model_uris(summary, decision)}


@task(task_id="report")
def report(
    summary: XComArg | dict[str, Any],
    decision: XComArg | dict[str, Any],
    policy: dict[str, Any],
    dag_id: str,
) -> dict[str, str]:
    """Write ``report.html`` + ``report.md`` beside the artifact and log the markdown summary; the
    evaluation job's usage record (``usage.json`` beside the artifact), when there is one, goes in too."""
    from airflow_ray_provider.templates.champion_challenger.report import build_report, write_report
    from airflow_ray_provider.templates.collect import read_usage, usage_summary

    summary, decision = resolved(summary), resolved(decision)
    rendered = build_report(
        summary,
        Decision.from_dict(decision),
        policy=DecisionPolicy.from_dict(policy),
        title=f"{dag_id}: champion vs challenger ({(summary.get('data') or {}).get('uri')})",
        usage=usage_summary(read_usage(summary.get("artifact_uri"), log)),
    )
    paths = write_report(summary["artifact_uri"], rendered)
    log.info("Report written to %s\n%s", paths["html"], rendered.markdown)
    return paths


@task.branch(task_id="branch")
def choose(decision: XComArg | dict[str, Any]) -> str:
    """``promote`` when the policy says so, else ``keep_champion`` (also for ``inconclusive``)."""
    return "promote" if resolved(decision)["outcome"] == PROMOTE else "keep_champion"


def make_promote(model_asset: Asset, on_promote: PromoteCallable | None) -> Any:
    """The promote task: call the user's callable, then record an asset event naming the new model."""

    @task(task_id="promote", outlets=[model_asset])
    def promote(
        decision: XComArg | dict[str, Any], report_paths: XComArg | dict[str, str], **context: Any
    ) -> dict[str, Any]:
        decision = {**resolved(decision), "report": resolved(report_paths).get("html")}
        result = on_promote(decision, context) if on_promote is not None else None
        challengers = len(decision.get("candidates") or ()) or 1
        extra = {
            "winner": decision.get("winner") or decision.get("challenger"),
            "model_uri": decision.get("challenger_uri"),
            "previous_model_uri": decision.get("champion_uri"),
            "model_sha256": decision.get("challenger_sha256"),
            "metrics_uri": f"{str(decision.get('artifact_uri', '')).rstrip('/')}/metrics.json",
            "report": decision["report"],
            "primary_metric": decision.get("primary_metric"),
            "challengers": challengers,
            "correction": decision.get("correction"),
        }
        context["outlet_events"][model_asset].extra = extra
        log.info(
            "Promoted %s (asset %s); on_promote returned %r", extra["model_uri"], model_asset.uri, result
        )
        return {"promoted": extra["model_uri"], "callback_result": _jsonable(result)}

    return promote


@task(task_id="keep_champion")
def keep_champion(
    decision: XComArg | dict[str, Any], report_paths: XComArg | dict[str, str]
) -> dict[str, Any]:
    """Keep the champion; log why (``keep_champion`` or ``inconclusive``)."""
    decision, report_paths = resolved(decision), resolved(report_paths)
    log.info(
        "Keeping champion %s (outcome %s); report: %s",
        decision.get("champion_uri"),
        decision["outcome"],
        report_paths.get("html"),
    )
    for reason in decision.get("reasons") or ():
        log.info("  %s", reason)
    return {"kept": decision.get("champion_uri"), "outcome": decision["outcome"]}


def _jsonable(value: Any) -> Any:
    import json

    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
