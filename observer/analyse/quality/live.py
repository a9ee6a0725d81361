"""Scoring of sampled live outputs from the sample store: rule checks on all, the judge on a fraction.

Each check's result is attached to the sample (`rule:<check>`, `judge:<rubric>`), then a `rules`
marker score closes the sample, so a pass that dies half-way re-scores only unfinished samples.
Which samples are judged is decided by their content hash, so the choice is stable across restarts.

With a shared store (`judge_jobs` set), judge calls are not made here: each chosen sample becomes a durable
`judge` job any replica runs (observer.store.work), and results reach the state through the store's feed
(`sync`), so every replica counts them once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from observer.analyse.quality import rules
from observer.analyse.quality.events import EvaluationSink, emit_all, sample_events
from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.model import Outcome, scorer_name
from observer.analyse.quality.prompts import Rubric
from observer.analyse.quality.state import QualityState
from observer.config.quality import GoodputCheckSpec, LiveSpec
from observer.errors import JudgeError
from observer.store.base import SampleStore, StoredSample
from observer.store.jobs import JobSpec, ScoreWrite

log = logging.getLogger("observer.quality")

DONE_MARKER = "rules"
JUDGE_CHECK = "judge"
JUDGE_JOB = "judge"  # kind of the shared-work job that judges one live sample


def judge_job(rubric: str, sample_id: int) -> JobSpec:
    """The job that judges one stored sample with `rubric` (its key makes enqueueing it idempotent)."""
    return JobSpec(kind=JUDGE_JOB, key=f"judge:{rubric}:{sample_id}", payload={"sample_id": sample_id})


def live_check(check: str, sample: StoredSample, goodput: GoodputCheckSpec | None = None) -> Outcome:
    """Run one reference-free live check on a stored sample."""
    match check:
        case "goodput":
            g = goodput or GoodputCheckSpec()
            return rules.met_goodput(ttft_s=sample.ttft_s, latency_s=sample.latency_s,
                                     output_tokens=sample.output_tokens, finish_reason=sample.finish_reason,
                                     ttft_target=g.ttft_seconds, tpot_target=g.tpot_seconds,
                                     error_reasons=frozenset(g.error_reasons))
        case "empty":
            return rules.not_empty(sample.output)
        case "refusal":
            return rules.not_refusal(sample.output)
        case "repetition":
            return rules.no_repetition(sample.output)
        case "truncation":
            return rules.not_truncated(sample.finish_reason)
        case "invalid_json":
            return rules.valid_json_when_expected(sample.prompt, sample.output)
        case "tool_call":
            return rules.valid_tool_calls(sample.output)
    raise ValueError(f"unknown live check {check!r}")


def selected_for_judge(content_hash: str, fraction: float) -> bool:
    """Stable pseudo-random choice of a `fraction` of samples, keyed by their content hash."""
    if fraction <= 0:
        return False
    h = int.from_bytes(hashlib.sha256(content_hash.encode()).digest()[:8], "big")
    return h / 2**64 < fraction


@dataclass
class LiveScorer:
    """One pass over every version's unscored samples."""

    store: SampleStore
    state: QualityState
    spec: LiveSpec
    judge: JudgeClient | None = None
    rubric: Rubric | None = None
    clock: Callable[[], float] | None = None
    # Shared store: enqueue judge calls as jobs, and read results back from the store's feed.
    judge_jobs: Callable[[Sequence[JobSpec]], Awaitable[object]] | None = None
    sync: Callable[[], Awaitable[int]] | None = None
    events: EvaluationSink | None = None  # each check's result as an evaluation event, once it is stored

    async def run_once(self, versions: Sequence[str]) -> int:
        """Score up to `batch_size` unscored samples per version; return how many were scored."""
        done = 0
        for version in versions:
            batch = await asyncio.to_thread(self.store.unscored, version, DONE_MARKER, limit=self.spec.batch_size)
            if batch:
                done += await self._score(version, batch)
        return done

    async def _score(self, version: str, batch: Sequence[StoredSample]) -> int:
        events: dict[str, list[tuple[float, bool]]] = {str(c): [] for c in self.spec.checks}
        attachments: list[tuple[int, str, Outcome]] = []
        failed: dict[int, list[str]] = {}
        for sample in batch:
            failed[sample.id] = []
            for check in self.spec.checks:
                o = live_check(check, sample, self.spec.goodput)
                attachments.append((sample.id, scorer_name("rule", check), o))
                if o.decided:
                    events[check].append((sample.ts, not o.passed))
                if o.passed is False:
                    failed[sample.id].append(check)
        judge_events: list[tuple[float, bool]] = []
        if self.judge is not None and self.rubric is not None:
            chosen = [s for s in batch if selected_for_judge(s.content_hash, self.spec.judge_fraction)]
            if self.judge_jobs is not None:  # shared store: any replica judges them, as jobs
                await self.judge_jobs([judge_job(self.rubric.name, s.id) for s in chosen])
            else:
                outcomes = await asyncio.gather(*(self.judge_sample(s) for s in chosen))
                for s, o in zip(chosen, outcomes, strict=True):
                    attachments.append((s.id, scorer_name("judge", self.rubric.name), o))
                    if o.decided:
                        judge_events.append((s.ts, not o.passed))
        for sample in batch:
            bad = failed[sample.id]
            marker = Outcome(DONE_MARKER, not bad, None, "failed: " + ", ".join(bad) if bad else "all passed",
                             {"checks": list(self.spec.checks)})
            attachments.append((sample.id, DONE_MARKER, marker))
        await asyncio.to_thread(self._attach, attachments)
        if self.events is not None:
            by_id = {s.id: s for s in batch}
            scored: dict[int, list[tuple[str, Outcome]]] = {}
            for sid, scorer, o in attachments:
                scored.setdefault(sid, []).append((scorer, o))
            for sid, checks in scored.items():
                emit_all(self.events, sample_events(by_id[sid], checks))
        if self.sync is not None:
            await self.sync()
            return len(batch)
        for name, ev in events.items():
            self.state.record_live(version, name, ev)
        if judge_events:
            self.state.record_live(version, JUDGE_CHECK, judge_events)
        return len(batch)

    async def judge_sample(self, sample: StoredSample) -> Outcome:
        """The judge's outcome on one sample; judge failures are error outcomes (never a pass or a fail)."""
        assert self.judge is not None and self.rubric is not None
        try:
            v = await self.judge.judge(rubric=self.rubric, prompt=sample.prompt, output=sample.output)
        except JudgeError as e:
            return Outcome(JUDGE_CHECK, None, None, f"judge error ({e.reason}): {e}", {"judge_error": e.reason},
                           error=True)
        except Exception as e:  # an unexpected client failure is a judge error too, never a crash of the run
            log.error("judge call failed unexpectedly: %r", e)
            return Outcome(JUDGE_CHECK, None, None, f"judge error (unexpected): {e!r}", {"judge_error": "unexpected"},
                           error=True)
        return Outcome(JUDGE_CHECK, v.passed, v.normalised_score, v.reasoning[:500], v.meta())

    def _attach(self, attachments: Sequence[tuple[int, str, Outcome]]) -> None:
        for sample_id, scorer, o in attachments:
            w = as_score(sample_id, scorer, o)
            self.store.attach_score(sample_id, scorer=scorer, passed=w.passed, score=w.score, reason=w.reason,
                                    meta=w.meta)


def as_score(sample_id: int, scorer: str, o: Outcome) -> ScoreWrite:
    """The stored form of one check's outcome on a sample (an error outcome carries `error: true`)."""
    meta: dict[str, Any] = dict(o.meta)
    if o.error:
        meta["error"] = True
    return ScoreWrite(sample_id=sample_id, scorer=scorer, passed=o.passed, score=o.score, reason=o.reason, meta=meta)
