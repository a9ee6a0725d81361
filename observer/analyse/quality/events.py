"""Golden results as evaluation events: one `gen_ai.evaluation.result` per scored golden item."""

from __future__ import annotations

from typing import Protocol

from observer.analyse.quality.model import GoldenRunResult, ItemResult
from observer.evalevents import Evaluation


class EvaluationSink(Protocol):
    """Where evaluation events go (observer.evalevents.EvaluationEvents); never blocks."""

    def emit(self, e: Evaluation, *, sampled: bool = True) -> bool: ...


def _label(item: ItemResult) -> tuple[str, str | None]:
    if item.request_error:
        return "error", "request_error"
    if item.scorer_error:
        return "error", "judge_error" if item.judge_error else "scorer_error"
    if not item.scored:
        return "unscored", None
    return ("pass" if item.passed else "fail"), None


def golden_events(result: GoldenRunResult) -> list[Evaluation]:
    """One event per item of a golden run: its label, score (the mean of the checks' scores, else 1 or 0),
    the failing checks' reasons, and who judged it against which set."""
    out = []
    for item in result.items:
        label, error = _label(item)
        scores = [o.score for o in item.outcomes if o.score is not None and not o.error]
        score = sum(scores) / len(scores) if scores else ({"pass": 1.0, "fail": 0.0}.get(label))
        failing = [f"{o.check}: {o.reason}" for o in item.outcomes if o.passed is False or o.error]
        explanation = "; ".join(failing) or (item.answer.error or "")
        attributes: dict[str, str | int | float | bool] = {
            "observer.version": result.version, "observer.reference_set": result.golden_set,
            "observer.reference_set.hash": result.set_version, "observer.golden.item": item.item_id,
            "observer.golden.category": item.category,
            "observer.checks": ",".join(o.check for o in item.outcomes)}
        if result.judge_model:
            attributes["observer.evaluator.model"] = result.judge_model
        if result.judge_prompt_version:
            attributes["observer.evaluator.prompt_version"] = result.judge_prompt_version
        out.append(Evaluation(name=f"golden/{result.golden_set}", label=label, score=score,
                              explanation=explanation, error_type=error, attributes=attributes))
    return out


def emit_golden(sink: EvaluationSink | None, result: GoldenRunResult) -> None:
    """Send a run's items (subject to the sample rate); nothing without a sink."""
    if sink is not None:
        for e in golden_events(result):
            sink.emit(e)
