"""Scores as evaluation events: one `gen_ai.evaluation.result` per golden item, per live check or judge look at a
sampled request (linked to that request's trace), and per paired check of a shadow pair (linked to the trace of
the request it replayed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from observer.analyse.quality.model import GoldenRunResult, ItemResult, Outcome, parse_scorer
from observer.evalevents import Evaluation
from observer.store.base import StoredSample


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
        judged = next((o for o in item.outcomes if o.check == "judge" and o.meta), None)
        if judged is not None:
            attributes.update(evaluator(judged.meta))
        out.append(Evaluation(name=f"golden/{result.golden_set}", label=label, score=score,
                              explanation=explanation, error_type=error, attributes=attributes))
    return out


def emit_golden(sink: EvaluationSink | None, result: GoldenRunResult) -> None:
    """Send a run's items (subject to the sample rate); nothing without a sink."""
    if sink is not None:
        for e in golden_events(result):
            sink.emit(e)


_IDENTITY = (("judge_model", "model"), ("prompt_version", "prompt_version"), ("prompt_hash", "prompt_hash"),
             ("rubric", "rubric"), ("rubric_hash", "rubric_hash"))


def evaluator(meta: Mapping[str, Any]) -> dict[str, str | int | float | bool]:
    """The judge's identity as `observer.evaluator.*` attributes, from a judge score's meta or a pair's
    recorded identity (the conventions do not name these yet)."""
    return {f"observer.evaluator.{name}": str(meta[key]) for key, name in _IDENTITY if meta.get(key)}


def _outcome_label(o: Outcome) -> tuple[str, str | None] | None:
    """(label, error type) of one check's outcome; None when the check did not apply (nothing was evaluated)."""
    if o.error:
        return "error", "judge_error" if o.meta.get("judge_error") else "scorer_error"
    if o.passed is None:
        return None
    return ("pass" if o.passed else "fail"), None


def sample_events(sample: StoredSample, scored: Sequence[tuple[str, Outcome]]) -> list[Evaluation]:
    """One event per check run on a sampled request (`scored`: stored scorer name, outcome): `live/<check>` for a
    rule check, `judge/<rubric>` for the judge, each linked to the request's trace when it carried one. A check
    that did not apply (JSON validity where no JSON was asked for) sends nothing."""
    out = []
    for scorer, o in scored:
        parsed = parse_scorer(scorer)
        if parsed is None:  # the pass's completion marker, not a check
            continue
        kind, name = parsed
        labelled = _outcome_label(o)
        if labelled is None:
            continue
        label, error = labelled
        attributes: dict[str, str | int | float | bool] = {
            "observer.version": sample.version, "observer.sample.id": sample.id,
            "observer.sample.source": sample.source}
        if kind == "judge":
            attributes.update(evaluator(o.meta))
        score = o.score if o.score is not None else ({"pass": 1.0, "fail": 0.0}.get(label))
        out.append(Evaluation(name=f"{'live' if kind == 'rule' else 'judge'}/{name}", label=label, score=score,
                              explanation=o.reason if label != "pass" else "", error_type=error,
                              attributes=attributes, traceparent=sample.traceparent))
    return out


_PAIR_SCORE = {"win": 1.0, "tie": 0.5, "loss": 0.0}


def pair_events(canary: str, baseline: str, sample: StoredSample, body: Mapping[str, Any]) -> list[Evaluation]:
    """One event per paired rule check (`paired/<check>`) and one for the pairwise judge
    (`paired_judge/<rubric>`) of a stored shadow pair, from the canary's side: win, loss, tie, inconsistent
    or error, scored 1, 0 and 0.5 where decided; linked to the trace of the request the pair replayed."""
    common: dict[str, str | int | float | bool] = {
        "observer.version": canary, "observer.baseline": baseline, "observer.sample.id": sample.id,
        "observer.baseline_from": str(body.get("baseline_from", ""))}
    error = str(body.get("error") or "")
    out = []
    for check, outcome in (body.get("rules") or {}).items():
        out.append(Evaluation(name=f"paired/{check}", label=str(outcome), score=_PAIR_SCORE.get(str(outcome)),
                              explanation=error if outcome == "error" else "",
                              error_type="replay_error" if error else None, attributes=common,
                              traceparent=sample.traceparent))
    judged = body.get("judge")
    if isinstance(judged, Mapping):
        identity = body.get("judge_identity") or {}
        outcome = str(judged.get("outcome", "error"))
        attributes = {**common, **evaluator(identity), "observer.judge.calls": int(judged.get("calls", 0))}
        out.append(Evaluation(name=f"paired_judge/{identity.get('rubric', 'default')}", label=outcome,
                              score=_PAIR_SCORE.get(outcome), explanation=str(judged.get("error", "")),
                              error_type="judge_error" if outcome == "error" else None, attributes=attributes,
                              traceparent=sample.traceparent))
    return out


def emit_all(sink: EvaluationSink | None, events: Sequence[Evaluation]) -> None:
    """Send per-item events (subject to the sample rate); nothing without a sink."""
    if sink is not None:
        for e in events:
            sink.emit(e)
