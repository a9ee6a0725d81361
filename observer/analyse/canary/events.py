"""Canary verdicts as evaluation events: one `gen_ai.evaluation.result` per judged look of a pair."""

from __future__ import annotations

from typing import Protocol

from observer.analyse.canary.results import Outcome, Verdict
from observer.evalevents import Evaluation

VERDICT_EVALUATION = "canary_verdict"


class EvaluationSink(Protocol):
    """Where evaluation events go (observer.evalevents.EvaluationEvents); never blocks."""

    def emit(self, e: Evaluation, *, sampled: bool = True) -> bool: ...


def verdict_event(v: Verdict) -> Evaluation:
    """The verdict (label), its score (0-100), its reason, the pair, and the judge behind quality metrics."""
    failed = [m.name for m in v.metrics if m.outcome is Outcome.FAIL]
    attributes: dict[str, str | int | float | bool] = {
        "observer.version": v.canary, "observer.canary": v.canary, "observer.baseline": v.baseline,
        "observer.window_seconds": float(v.window_seconds), "observer.critical_failed": v.critical_failed,
        "observer.failed_metrics": ",".join(failed), "observer.requests.canary": v.n_canary,
        "observer.requests.baseline": v.n_baseline}
    for key, value in v.judge.items():
        attributes[f"observer.evaluator.{key}"] = value
    return Evaluation(name=VERDICT_EVALUATION, label=str(v.verdict), score=v.score, explanation=v.reason,
                      attributes=attributes)
