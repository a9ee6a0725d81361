"""Typed results of quality scoring: one check's outcome, one answer, one item, one golden run."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Outcome:
    """The result of one check on one output.

    `passed` is None when the check decided nothing: not applicable (no reference, unknown finish
    reason) or an error (`error=True`, e.g. a judge error). Undecided outcomes never count as a pass
    or a fail.
    """

    check: str
    passed: bool | None
    score: float | None
    reason: str
    meta: Mapping[str, Any] = field(default_factory=dict)
    error: bool = False

    @property
    def decided(self) -> bool:
        return self.passed is not None


@dataclass(frozen=True)
class Answer:
    """What a version answered to one golden request, measured on the client side."""

    text: str
    finish_reason: str | None
    ttft_s: float | None
    latency_s: float
    error: str | None = None  # request failed (transport, HTTP status, bad stream): nothing to score
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class ItemResult:
    """One golden item scored: the item passes when every decided check passes."""

    item_id: str
    category: str
    answer: Answer
    outcomes: tuple[Outcome, ...]

    @property
    def request_error(self) -> bool:
        return self.answer.error is not None

    @property
    def judge_error(self) -> bool:
        return any(o.error and o.check == "judge" for o in self.outcomes)

    @property
    def scorer_error(self) -> bool:
        """Any check errored (the judge, or the embedder): the item is unscored, never passed or failed."""
        return any(o.error for o in self.outcomes)

    @property
    def scored(self) -> bool:
        """Scored: an answer arrived, no check errored, and at least one check decided."""
        return not self.request_error and not self.scorer_error and any(o.decided for o in self.outcomes)

    @property
    def unscored_reason(self) -> str | None:
        """Why the item is not scored: request_error | judge_error | scorer_error | undecided; None if scored."""
        if self.request_error:
            return "request_error"
        if self.judge_error:
            return "judge_error"
        if self.scorer_error:
            return "scorer_error"
        return None if self.scored else "undecided"

    @property
    def passed(self) -> bool:
        return self.scored and all(o.passed for o in self.outcomes if o.decided)

    @property
    def score(self) -> float | None:
        """Mean score of the decided checks (each in [0, 1]); None when not scored."""
        scores = [o.score for o in self.outcomes if o.decided and o.score is not None]
        if not self.scored or not scores:
            return None
        return sum(scores) / len(scores)


@dataclass(frozen=True)
class GoldenRunResult:
    """One replay of one golden set against one version."""

    version: str
    golden_set: str
    set_version: str  # hash of the set's canonical content
    started: float
    finished: float
    items: tuple[ItemResult, ...]
    judge_model: str | None = None
    judge_prompt_version: str | None = None

    @property
    def scored(self) -> int:
        return sum(1 for i in self.items if i.scored)

    @property
    def passed(self) -> int:
        return sum(1 for i in self.items if i.passed)

    @property
    def judge_errors(self) -> int:
        return sum(1 for i in self.items if i.judge_error)

    @property
    def unscored(self) -> dict[str, int]:
        """Unscored items by reason."""
        out: dict[str, int] = {}
        for i in self.items:
            if (r := i.unscored_reason) is not None:
                out[r] = out.get(r, 0) + 1
        return out

    @property
    def request_errors(self) -> int:
        return sum(1 for i in self.items if i.request_error)

    @property
    def completed(self) -> bool:
        """A run completed when at least one item was scored (an unreachable version completes nothing)."""
        return self.scored > 0

    @property
    def pass_ratio(self) -> float | None:
        return self.passed / self.scored if self.scored else None

    @property
    def mean_score(self) -> float | None:
        scores = [s for i in self.items if (s := i.score) is not None]
        return sum(scores) / len(scores) if scores else None

    def latencies(self, kind: str = "latency") -> list[float]:
        """Client-side TTFT (`kind="ttft"`) or end-to-end latency of the answered requests."""
        out: list[float] = []
        for i in self.items:
            if i.request_error:
                continue
            v = i.answer.ttft_s if kind == "ttft" else i.answer.latency_s
            if v is not None:
                out.append(v)
        return out


MAX_STORED_ANSWER_CHARS = 2000  # a stored golden run keeps this much of each answer (the verdict needs none)


def encode_run(result: GoldenRunResult) -> dict[str, Any]:
    """A golden run as JSON for the store (answers cut to MAX_STORED_ANSWER_CHARS)."""
    def answer(a: Answer) -> dict[str, Any]:
        return {"text": a.text[:MAX_STORED_ANSWER_CHARS], "finish_reason": a.finish_reason, "ttft_s": a.ttft_s,
                "latency_s": a.latency_s, "error": a.error, "prompt_tokens": a.prompt_tokens,
                "completion_tokens": a.completion_tokens}

    def outcome(o: Outcome) -> dict[str, Any]:
        return {"check": o.check, "passed": o.passed, "score": o.score, "reason": o.reason, "meta": dict(o.meta),
                "error": o.error}

    return {"version": result.version, "golden_set": result.golden_set, "set_version": result.set_version,
            "started": result.started, "finished": result.finished, "judge_model": result.judge_model,
            "judge_prompt_version": result.judge_prompt_version,
            "items": [{"id": i.item_id, "category": i.category, "answer": answer(i.answer),
                       "outcomes": [outcome(o) for o in i.outcomes]} for i in result.items]}


def decode_run(body: Mapping[str, Any]) -> GoldenRunResult:
    """The GoldenRunResult `encode_run` stored; KeyError/TypeError/ValueError on a body it did not write."""
    items = tuple(ItemResult(str(i["id"]), str(i["category"]), Answer(**i["answer"]),
                             tuple(Outcome(**o) for o in i["outcomes"])) for i in body["items"])
    return GoldenRunResult(version=str(body["version"]), golden_set=str(body["golden_set"]),
                           set_version=str(body["set_version"]), started=float(body["started"]),
                           finished=float(body["finished"]), items=items, judge_model=body.get("judge_model"),
                           judge_prompt_version=body.get("judge_prompt_version"))


ScorerKind = Literal["rule", "judge"]
SCORER_KINDS: tuple[ScorerKind, ...] = ("rule", "judge")


def scorer_name(kind: ScorerKind, name: str) -> str:
    """The name a score is stored under: `rule:<check>` for a rule check, `judge:<rubric>` for the judge."""
    return f"{kind}:{name}"


def parse_scorer(scorer: str) -> tuple[ScorerKind, str] | None:
    """The (kind, check or rubric) of a stored scorer name, or None for a name of another form."""
    kind, sep, name = scorer.partition(":")
    for known in SCORER_KINDS:
        if sep and name and kind == known:
            return known, name
    return None

