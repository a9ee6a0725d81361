"""Apply a golden item's assertions to an answer: rule checks, embedding similarity and the judge."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from observer.analyse.quality import assertions as A
from observer.analyse.quality import rules
from observer.analyse.quality.golden import GoldenItem
from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.model import Answer, Outcome
from observer.analyse.quality.prompts import Rubric
from observer.analyse.quality.similarity import Embedder, cosine_scores, similarity_outcome
from observer.errors import JudgeError

log = logging.getLogger("observer.quality")


def rule_outcome(a: Any, item: GoldenItem, answer: Answer) -> Outcome | None:
    """The outcome of a rule assertion, or None when `a` is not a rule (similarity, judge)."""
    out, ref = answer.text, item.reference or ""
    match a:
        case A.Exact():
            return rules.exact(out, a.value if a.value is not None else ref)
        case A.Normalised():
            return rules.normalised_match(out, a.value if a.value is not None else ref)
        case A.Contains():
            return rules.contains(out, a.values, mode=a.mode, fold=a.normalise)
        case A.NotContains():
            return rules.not_contains(out, a.values, fold=a.normalise)
        case A.Regex():
            return rules.regex(out, a.pattern, mode=a.mode, ignore_case=a.ignore_case, multiline=a.multiline)
        case A.JsonValid():
            return rules.json_valid(out)
        case A.JsonSchema():
            return rules.json_schema(out, a.json_schema)
        case A.Length():
            return rules.length(out, min_chars=a.min_chars, max_chars=a.max_chars, min_words=a.min_words,
                                max_words=a.max_words)
        case A.NotRefusal():
            return rules.not_refusal(out)
        case A.Refusal():
            return rules.refusal(out)
        case A.NoRepetition():
            return rules.no_repetition(out, min_repeats=a.min_repeats)
        case A.NotTruncated():
            return rules.not_truncated(answer.finish_reason)
    return None


@dataclass
class Scorer:
    """Scores answers to golden items. The embedder is loaded on first use, once."""

    judge: JudgeClient | None = None
    rubrics: Mapping[str, Rubric] = field(default_factory=dict)
    embedder_factory: Callable[[], Embedder] | None = None
    similarity_threshold: float = 0.75
    _embedder: Embedder | None = None
    _embedder_error: str | None = None
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def embedder(self) -> Embedder | None:
        """The embedder, loaded in a worker thread on first use; None (with a logged reason) if unavailable."""
        async with self._lock:
            if self._embedder is None and self._embedder_error is None:
                if self.embedder_factory is None:
                    self._embedder_error = "no embedder configured"
                else:
                    try:
                        self._embedder = await asyncio.to_thread(self.embedder_factory)
                    except Exception as e:  # a missing model must not kill scoring: items become unscored
                        self._embedder_error = f"could not load the embedder: {e}"
                        log.error("%s", self._embedder_error)
        return self._embedder

    async def score(self, items: Sequence[GoldenItem], answers: Sequence[Answer]) -> list[tuple[Outcome, ...]]:
        """Outcomes per item (answers with a request error get none): rules, then similarity, then judge."""
        results: list[list[Outcome]] = [[] for _ in items]
        sim_jobs: list[tuple[int, str, float]] = []
        judge_jobs: list[tuple[int, str]] = []
        for n, (item, answer) in enumerate(zip(items, answers, strict=True)):
            if answer.error is not None:
                continue
            for a in item.assertions:
                rule = rule_outcome(a, item, answer)
                if rule is not None:
                    results[n].append(rule)
                elif isinstance(a, A.Similarity):
                    threshold = a.threshold if a.threshold is not None else self.similarity_threshold
                    sim_jobs.append((n, a.value if a.value is not None else item.reference or "", threshold))
                elif isinstance(a, A.Judge):
                    judge_jobs.append((n, a.rubric or item.rubric or ""))
        if sim_jobs:
            for n, outcome in await self._similarities(sim_jobs, answers):
                results[n].append(outcome)
        if judge_jobs:
            verdicts = await asyncio.gather(*(self._judge(items[n], answers[n], r) for n, r in judge_jobs))
            for (n, _), outcome in zip(judge_jobs, verdicts, strict=True):
                results[n].append(outcome)
        return [tuple(r) for r in results]

    async def _similarities(self, jobs: list[tuple[int, str, float]], answers: Sequence[Answer]
                            ) -> list[tuple[int, Outcome]]:
        embedder = await self.embedder()
        if embedder is None:
            reason = self._embedder_error or "embedder unavailable"
            return [(n, Outcome("similarity", None, None, reason, error=True)) for n, _, _ in jobs]
        try:
            sims = await asyncio.to_thread(cosine_scores, embedder, [answers[n].text for n, _, _ in jobs],
                                           [ref for _, ref, _ in jobs])
        except Exception as e:  # an embedder failure makes these items unscored, never passed
            return [(n, Outcome("similarity", None, None, f"embedding failed: {e}", error=True)) for n, _, _ in jobs]
        return [(n, similarity_outcome(s, t, model_id=embedder.model_id))
                for (n, _, t), s in zip(jobs, sims, strict=True)]

    async def _judge(self, item: GoldenItem, answer: Answer, rubric_name: str) -> Outcome:
        if self.judge is None:
            return Outcome("judge", None, None, "judge not configured (quality.judge.url)")
        rubric = self.rubrics.get(rubric_name)
        if rubric is None:
            return Outcome("judge", None, None, f"unknown rubric {rubric_name!r}", error=True)
        try:
            v = await self.judge.judge(rubric=rubric, prompt=item.prompt_text, output=answer.text,
                                       reference=item.reference)
        except JudgeError as e:
            return Outcome("judge", None, None, f"judge error ({e.reason}): {e}", {"judge_error": e.reason},
                           error=True)
        except Exception as e:  # an unexpected client failure is a judge error too, never a crash of the run
            log.error("judge call failed unexpectedly: %r", e)
            return Outcome("judge", None, None, f"judge error (unexpected): {e!r}", {"judge_error": "unexpected"},
                           error=True)
        return Outcome("judge", v.passed, v.normalised_score, v.reasoning[:500], v.meta())
