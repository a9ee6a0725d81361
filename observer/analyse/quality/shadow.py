"""Shadow replay: stable's sampled live prompts answered by the canary off the user path, paired.

The leader scans new stable samples (proxy or ingest; never golden replays), skips the ones that are not
replay-safe (too long, a tool turn, a configured marker) or already paired, and queues the rest (bounded:
drops are counted). Replays start at most `rate_per_second`, `concurrency` at a time, within a daily budget
per canary. Each replay carries `X-Observer-Shadow: 1` (the sampling proxy forwards it but never samples or
counts it) and goes to the version's shadow target. The canary's answer and, with `baseline: replay`, a
fresh stable answer to the identical request are compared by paired rule checks and the pairwise judge;
the pair is stored once, with its results, and the canary judge reads the pairs back from the store.

A replay that errors or times out makes an undecided pair (counted, never a win for either side).
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.quality.events import EvaluationSink, emit_all, pair_events
from observer.analyse.quality.model import Answer
from observer.analyse.quality.pairwise import PairwiseJudge, paired_rule
from observer.analyse.quality.runner import ServedModels, ask
from observer.config.fleet import VersionSpec
from observer.config.quality import ShadowSpec
from observer.fleetview import FleetView
from observer.store.base import SampleStore, StoredSample
from observer.store.pairs import PairRecord, PairStore

log = logging.getLogger("observer.quality.shadow")

SHADOW_HEADERS = {"X-Observer-Shadow": "1"}
DAY_S = 86400.0
SCAN_LIMIT = 500  # newest stable samples looked at per scan and canary
SKIP_REASONS = ("too_long", "not_replay_safe", "already_paired", "budget", "queue_full", "no_url")
REPLAY_OUTCOMES = ("ok", "error")
PAIR_OUTCOMES = ("win", "loss", "tie", "inconsistent", "error", "none")


class ShadowStore(SampleStore, PairStore, Protocol):
    """The sample store with its pairs (SQLite, PostgreSQL)."""


@dataclass(frozen=True)
class ShadowPair:
    """One canary replayed against its baseline, with where each is asked."""

    canary: VersionSpec
    baseline: VersionSpec
    canary_url: str | None  # None: nowhere to ask it (a discovered version without an OpenAI URL)
    baseline_url: str | None

    def missing_url(self, baseline_replayed: bool) -> str | None:
        """The version that cannot be asked, if any."""
        if self.canary_url is None:
            return self.canary.name
        return self.baseline.name if baseline_replayed and self.baseline_url is None else None


class VersionPair(Protocol):
    """A (canary, baseline) pair of version names, as the canary area resolves them."""

    @property
    def canary(self) -> str: ...

    @property
    def baseline(self) -> str: ...


@dataclass(frozen=True)
class FleetShadowPairs:
    """The shadow pairs now, from the fleet's pairs: each side is asked at its shadow target, else at its OpenAI
    URL (a discovered version's Service or pod), so a new Rollout revision is shadowed without a restart."""

    pairs: Callable[[], Sequence[VersionPair]]
    fleet: FleetView
    targets: Mapping[str, str]

    def __call__(self) -> list[ShadowPair]:
        out = []
        for p in self.pairs():
            c, b = self.fleet.version(p.canary), self.fleet.version(p.baseline)
            if c is not None and b is not None:
                out.append(ShadowPair(canary=c, baseline=b, canary_url=self.targets.get(c.name) or c.openai,
                                      baseline_url=self.targets.get(b.name) or b.openai))
        return out


@dataclass
class ShadowStats:
    """Bounded counters of the shadow replay (exported by the quality collector)."""

    replays: Counter[tuple[str, str]] = field(default_factory=Counter)  # (version, ok|error)
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)  # (canary, reason)
    pairs: Counter[tuple[str, str]] = field(default_factory=Counter)  # (canary, judge outcome)


@dataclass(frozen=True)
class _Queued:
    pair: ShadowPair
    sample: StoredSample


def day_start(ts: float) -> float:
    """Start of the UTC day `ts` falls in."""
    return math.floor(ts / DAY_S) * DAY_S


class ShadowReplayer:
    """Shadow replays for every (canary, baseline) pair, and the paired outcomes the canary judge reads."""

    def __init__(self, *, http: httpx.AsyncClient, spec: ShadowSpec, store: ShadowStore,
                 pairs: Callable[[], Sequence[ShadowPair]], judge: PairwiseJudge | None,
                 clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 events: EvaluationSink | None = None) -> None:
        self.http = http
        self.events = events
        self.spec = spec
        self.store = store
        self._pairs = pairs
        self.judge = judge
        self.models = ServedModels(http, timeout=spec.timeout_seconds)
        self.clock = clock
        self.monotonic = monotonic
        self.sleep = sleep
        self.stats = ShadowStats()
        self._patterns = [re.compile(p) for p in spec.skip_patterns]
        self._queue: deque[_Queued] = deque()
        self._queued_ids: set[tuple[str, int]] = set()
        self._cursor: dict[str, float] = {}
        self._used: dict[str, tuple[float, int]] = {}  # canary -> (day start, pairs started that day)
        self._next_start = 0.0
        self._warned: set[tuple[str, str]] = set()  # (canary, version without a URL) already logged

    @property
    def pairs(self) -> Sequence[ShadowPair]:
        """The pairs now (they follow the fleet)."""
        return self._pairs()

    # --- what the canary judge reads ---

    def paired_outcomes(self, canary: str, *, since: float) -> tuple[list[Mapping[str, str]], str,
                                                                      dict[str, str]]:
        """Per stored pair of `canary` since `since`: {check: outcome}, with `judge` for the pairwise judge;
        plus a note when replays stopped (budget) and the judge identity of the newest pair."""
        records = self.store.pairs(canary, since=since, limit=self.spec.daily_budget * 2)
        outcomes: list[Mapping[str, str]] = []
        identity: dict[str, str] = {}
        for r in records:
            row = {str(k): str(v) for k, v in (r.body.get("rules") or {}).items()}
            judged = r.body.get("judge")
            if isinstance(judged, Mapping):
                row["judge"] = str(judged.get("outcome", "error"))
                identity = {str(k): str(v) for k, v in (r.body.get("judge_identity") or {}).items()}
            elif r.body.get("error"):
                row["judge"] = "error"
            outcomes.append(row)
        note = ""
        if self.budget_left(canary) <= 0:
            note = f"shadow replay budget of {self.spec.daily_budget} pairs/day is spent for {canary}"
        return outcomes, note, identity

    # --- the leader's job ---

    @property
    def queue_depth(self) -> int:
        return len(self._queue)

    def _used_today(self, canary: str) -> tuple[float, int]:
        """(today's UTC day start, pairs started today); yesterday's count does not carry over."""
        day = day_start(self.clock())
        start, used = self._used.get(canary, (day, 0))
        return day, (used if start == day else 0)

    def budget_left(self, canary: str) -> int:
        return self.spec.daily_budget - self._used_today(canary)[1]

    def _use(self, canary: str) -> None:
        day, used = self._used_today(canary)
        self._used[canary] = (day, used + 1)

    def _restore_budget(self, canary: str) -> None:
        """After a restart: today's pairs already stored count against today's budget."""
        if canary in self._used:
            return
        day = day_start(self.clock())
        stored = self.store.pairs(canary, since=day, limit=self.spec.daily_budget)
        self._used[canary] = (day, len(stored))

    def _replay_safe(self, sample: StoredSample) -> str | None:
        if len(sample.prompt) > self.spec.max_prompt_chars:
            return "too_long"
        if any(p.search(sample.prompt) for p in self._patterns):
            return "not_replay_safe"
        return None

    def scan(self) -> int:
        """Queue new stable samples of every pair (blocking store reads: run in a thread). Returns queued."""
        queued = 0
        now = self.clock()
        for pair in self.pairs:
            canary = pair.canary.name
            self._restore_budget(canary)
            since = self._cursor.get(canary, day_start(now))
            fresh = [s for s in self.store.samples(pair.baseline.name, since=since, limit=SCAN_LIMIT)
                     if s.source != "golden"]
            if fresh:
                self._cursor[canary] = max(s.ts for s in fresh)
            missing = pair.missing_url(self.spec.baseline == "replay")
            if missing is not None:
                self.stats.skipped[(canary, "no_url")] += len(fresh)
                if fresh and (canary, missing) not in self._warned:
                    self._warned.add((canary, missing))
                    log.warning("shadow replay of %s: version %s has no URL to ask; %d prompt(s) skipped. Set "
                                "quality.shadow.targets.%s, its openai URL, or (discovered) discovery.kubernetes."
                                "models[].openai_url", canary, missing, len(fresh), missing)
                continue
            done = self.store.paired_samples(canary, [s.id for s in fresh])
            waiting = sum(1 for q in self._queue if q.pair.canary.name == canary)
            for s in sorted(fresh, key=lambda s: (s.ts, s.id)):
                if s.id in done or (canary, s.id) in self._queued_ids:
                    reason: str | None = "already_paired"
                else:
                    reason = self._replay_safe(s)
                if reason is None and self.budget_left(canary) - waiting <= 0:
                    reason = "budget"
                if reason is None and len(self._queue) >= self.spec.queue_size:
                    reason = "queue_full"
                if reason is not None:
                    if reason != "already_paired":  # the newest sample is seen again by the next scan
                        self.stats.skipped[(canary, reason)] += 1
                    continue
                self._queue.append(_Queued(pair, s))
                self._queued_ids.add((canary, s.id))
                waiting += 1
                queued += 1
        return queued

    async def run_once(self) -> int:
        """Scan, then replay what this interval's rate allows. Returns the pairs stored."""
        await asyncio.to_thread(self.scan)
        allowed = max(1, math.floor(self.spec.rate_per_second * self.spec.interval_seconds))
        batch: list[_Queued] = []
        while self._queue and len(batch) < allowed:
            q = self._queue.popleft()
            self._queued_ids.discard((q.pair.canary.name, q.sample.id))
            if self.budget_left(q.pair.canary.name) <= 0:
                self.stats.skipped[(q.pair.canary.name, "budget")] += 1
                continue
            self._use(q.pair.canary.name)
            batch.append(q)
        slots = asyncio.Semaphore(self.spec.concurrency)

        async def one(q: _Queued) -> bool:
            async with slots:
                await self._pace()
                return await self.replay(q.pair, q.sample)

        stored = sum(await asyncio.gather(*(one(q) for q in batch)))
        if stored:
            log.info("shadow replay: %d pair(s) stored", stored)
        return stored

    async def _pace(self) -> None:
        """Space replay starts by 1 / rate_per_second."""
        now = self.monotonic()
        wait = self._next_start - now
        self._next_start = max(now, self._next_start) + 1.0 / self.spec.rate_per_second
        if wait > 0:
            await self.sleep(wait)

    async def _answer(self, version: VersionSpec, url: str, prompt: str) -> Answer:
        try:
            model = await self.models.model(version, url)
        except ValueError as e:
            return Answer("", None, None, 0.0, error=str(e))
        answer = await ask(self.http, base_url=url, model=model, messages=[{"role": "user", "content": prompt}],
                           max_tokens=self.spec.max_tokens, temperature=self.spec.temperature,
                           timeout=self.spec.timeout_seconds, headers=SHADOW_HEADERS)
        self.stats.replays[(version.name, "error" if answer.error else "ok")] += 1
        return answer

    async def replay(self, pair: ShadowPair, sample: StoredSample) -> bool:
        """Replay one stable sample's prompt, compare the answers and store the pair (False: not stored; a pair
        without the URLs it needs is never queued)."""
        c_url, b_url = pair.canary_url, pair.baseline_url
        if self.spec.baseline == "replay":
            if c_url is None or b_url is None:
                return False
            c, b = await asyncio.gather(self._answer(pair.canary, c_url, sample.prompt),
                                        self._answer(pair.baseline, b_url, sample.prompt))
        else:
            if c_url is None:
                return False
            c = await self._answer(pair.canary, c_url, sample.prompt)
            b = Answer(sample.output, sample.finish_reason, sample.ttft_s, sample.latency_s or 0.0)
        body: dict[str, Any] = {"prompt": sample.prompt, "baseline_from": self.spec.baseline,
                                "canary": _answer_body(c), "baseline": _answer_body(b)}
        if sample.traceparent:  # the replayed request's trace, for the report's link
            body["traceparent"] = sample.traceparent
        error = c.error or b.error
        if error:
            body["error"] = ("canary: " if c.error else "baseline: ") + error[:300]
            body["rules"] = {check: "error" for check in self.spec.rules}
            outcome = "error"
        else:
            body["rules"] = {check: paired_rule(check, prompt=sample.prompt, baseline=b.text, canary=c.text,
                                                baseline_finish=b.finish_reason, canary_finish=c.finish_reason)
                             for check in self.spec.rules}
            outcome = "none"
            if self.judge is not None:
                j = await self.judge.compare(prompt=sample.prompt, baseline=b.text, canary=c.text)
                body["judge"] = j.record()
                body["judge_identity"] = self.judge.identity()
                outcome = j.outcome
        self.stats.pairs[(pair.canary.name, outcome)] += 1
        record = PairRecord(canary=pair.canary.name, baseline=pair.baseline.name, sample_id=sample.id,
                            ts=self.clock(), body=body)
        stored = await asyncio.to_thread(self.store.add_pair, record)
        if stored:
            emit_all(self.events, pair_events(pair.canary.name, pair.baseline.name, sample, body))
        return stored


def _answer_body(a: Answer) -> dict[str, Any]:
    out: dict[str, Any] = {"output": a.text, "finish_reason": a.finish_reason, "latency_s": round(a.latency_s, 4)}
    if a.error:
        out["error"] = a.error[:300]
    return out


class ShadowCollector(Collector):
    """Exports the shadow replay's counters (label `version` is the canary for skips and pairs)."""

    def __init__(self, replayer: ShadowReplayer) -> None:
        self.r = replayer

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        st = self.r.stats
        canaries = [p.canary.name for p in self.r.pairs]
        versions = sorted({v for p in self.r.pairs for v in (p.canary.name, p.baseline.name)})
        replays = CounterMetricFamily(names.SHADOW_REPLAYS, "Shadow replays sent, by outcome (error: HTTP error, "
                                      "timeout or broken stream; never a win for either side).",
                                      labels=[names.VERSION, names.OUTCOME])
        for v in versions:
            for o in REPLAY_OUTCOMES:
                replays.add_metric([v, o], st.replays.get((v, o), 0))
        skipped = CounterMetricFamily(names.SHADOW_SKIPPED, "Stable prompts not replayed to a canary, by reason "
                                      "(queue_full: dropped).", labels=[names.VERSION, names.REASON])
        pairs = CounterMetricFamily(names.SHADOW_PAIRS, "Shadow pairs stored per canary, by pairwise-judge outcome "
                                    "(none: no judge configured).", labels=[names.VERSION, names.OUTCOME])
        budget = GaugeMetricFamily(names.SHADOW_BUDGET_REMAINING, "Shadow pairs a canary may still get today "
                                   "(UTC).", labels=[names.VERSION])
        for c in canaries:
            for reason in SKIP_REASONS:
                skipped.add_metric([c, reason], st.skipped.get((c, reason), 0))
            for o in PAIR_OUTCOMES:
                pairs.add_metric([c, o], st.pairs.get((c, o), 0))
            budget.add_metric([c], self.r.budget_left(c))
        yield from (replays, skipped, pairs, budget)
        yield GaugeMetricFamily(names.SHADOW_QUEUE, "Stable prompts waiting for a shadow replay.",
                                value=self.r.queue_depth)

    def position(self) -> tuple[int, int]:
        """(consistent, judged) pairs: judged excludes errors and pairs without a judge."""
        st = self.r.stats.pairs
        judged = sum(n for (_, o), n in st.items() if o in ("win", "loss", "tie", "inconsistent"))
        inconsistent = sum(n for (_, o), n in st.items() if o == "inconsistent")
        return judged - inconsistent, judged
