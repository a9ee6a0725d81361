"""The canary service: judges configured pairs on demand and on a schedule, keeps the latest verdicts."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from observer.analyse.canary import absolute
from observer.analyse.canary.events import EvaluationSink, verdict_event
from observer.analyse.canary.judge import ArmData, Outcome, Verdict
from observer.analyse.canary.results import UNKNOWN_VERSIONS, Evidence
from observer.analyse.canary.sources import CanarySource
from observer.analyse.canary.verdict import judge
from observer.analyse.pairs import FleetPairs, Pair, expected_share, resolve_alias
from observer.config.spec import ObserverConfig
from observer.fleetview import FleetView, LiveFleet

Clock = Callable[[], float]
log = logging.getLogger("observer.canary")

STEP_FORGET_SECONDS = 300.0
"""A step start taken from a gate's first ask (no `since`) is forgotten after this long without an ask of the
same step: the gate asks every interval while its analysis runs, so a silence this long ends the step."""


@dataclass(frozen=True)
class Split:
    """The canary's traffic share a gate expects: a fraction, or None for the versions' configured weights;
    `check=False` (the gate's `any`) skips the split check."""

    share: float | None
    check: bool = True


@dataclass(frozen=True)
class StepAsk:
    """A gate's step as this observer saw it: which step (split and length), its first ask, its latest ask."""

    split: Split
    step_seconds: float
    started: float
    last_ask: float


@dataclass
class PairState:
    """What the service keeps for one canary pair between looks (one record, dropped with the pair)."""

    latest: Verdict | None = None
    arms: tuple[ArmData, ArmData] | None = None
    """The data behind the latest verdict, for the report page: read, never re-queried."""
    split: Split = Split(None)
    """The split the gate last asked about (Argo passes the step's setWeight): the periodic judgment exported
    to Prometheus uses it too, so the gate's web and Prometheus metrics agree."""
    analysis_start: float | None = None
    """The latest analysis start a gate asked with (`since`; Flagger's revision first seen): the periodic
    judgment starts its window there too, so a version name reused across revisions (Flagger's `<name>` against
    `<name>-primary`) is not judged on the previous revision's requests."""
    undecided_since: float | None = None
    """When the current run of undecided looks began (canary.end: a canary that never decides ends)."""
    step_seconds: float | None = None
    """The planned step length the gate last asked with."""
    step: StepAsk | None = None
    """The start of that step when the gate gave no `since` (Argo's web metric cannot): its first ask."""


def parse_split(text: str | None) -> Split | str:
    """The API's `weight`: a fraction (0.05), an Argo percentage (5), `any`, or empty; else the reason it is
    not one."""
    text = (text or "").strip().lower()
    if not text:
        return Split(None)
    if text == "any":
        return Split(None, check=False)
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    share = value / 100.0 if value >= 1.0 else value
    if not 0.0 < share < 1.0:
        return f"weight {text[:20]!r} is not a share in (0, 1), a percentage in [1, 100), or 'any'"
    return Split(share)


class CanaryService:
    """Judges pairs on demand and on a schedule; keeps the latest verdict per pair (bounded by the fleet)."""

    def __init__(self, config: ObserverConfig, source: CanarySource, *, clock: Clock,
                 fleet: FleetView | None = None, events: EvaluationSink | None = None) -> None:
        self.config = config
        self.spec = config.canary
        self.source = source
        self.clock = clock
        self.fleet: FleetView = fleet if fleet is not None else LiveFleet(config.fleet.versions)
        self._pairs = FleetPairs(config, self.fleet)
        self._pairs_gen = -1
        self._state: dict[Pair, PairState] = {}
        self.evaluations: Counter[tuple[str, str, str]] = Counter()
        self.source_errors: Counter[tuple[str, str]] = Counter()
        self.events = events
        self.objectives = absolute.objectives(config.slo, config.canary)
        unread = absolute.unread(config.slo, config.canary)
        if unread:
            log.warning("canary.slo_check: latency SLO(s) %s read a histogram no canary latency metric reads; the "
                        "canary is not held to them (add a latency metric of that family)", ", ".join(unread))

    @property
    def pairs(self) -> list[Pair]:
        """Configured pairs (or static roles), plus discovered canaries against their group's stable version;
        recomputed when the fleet changes (a promotion ends a pair, a new revision starts one)."""
        pairs = self._pairs.current()
        if self._pairs_gen != self.fleet.generation:
            self._pairs_gen = self.fleet.generation
            for gone in [p for p in self._state  # a pair whose version left: its verdict series end
                         if self.fleet.version(p.canary) is None or self.fleet.version(p.baseline) is None]:
                del self._state[gone]
        return pairs

    def latest(self, canary: str, baseline: str) -> Verdict | None:
        """The last verdict for the pair, or None before its first judgement."""
        state = self._state.get(Pair(canary, baseline))
        return None if state is None else state.latest

    def evidence(self, canary: str, baseline: str) -> Evidence | None:
        """The last verdict for the pair with the data of both arms it was judged on, or None."""
        state = self._state.get(Pair(canary, baseline))
        if state is None or state.latest is None or state.arms is None:
            return None
        return Evidence(verdict=state.latest, canary=state.arms[0], baseline=state.arms[1])

    def looks(self, canary: str, baseline: str) -> int:
        """How many times the pair was judged (periodic job and gate asks) since this process started."""
        return sum(n for (c, b, _), n in self.evaluations.items() if c == canary and b == baseline)

    def verdicts(self) -> list[Verdict]:
        """The latest verdict of every judged pair."""
        return [s.latest for _, s in sorted(self._state.items(), key=lambda kv: (kv[0].canary, kv[0].baseline))
                if s.latest is not None]

    async def evaluate(self, canary: str, baseline: str, *, since: float | None = None,
                       split: Split = Split(None), step_seconds: float | None = None) -> Verdict:
        """Judge `canary` against `baseline` over the window ending now; with `since` and `step_seconds`, a step
        that started at `since` and is planned to end `step_seconds` later (planned.py)."""
        now = self.clock()
        start = now - self.spec.window_seconds
        if since is not None:
            start = max(start, since)
        metrics = self.spec.metrics
        c = await self.source.arm(canary, metrics, since=start, now=now, with_drift=True)
        b = await self.source.arm(baseline, metrics, since=start, now=now, with_drift=False)
        spec = self.fleet.version(canary)
        if spec is not None and spec.pods_waiting:  # discovery's, not the source's: the pods it cannot scrape
            c = replace(c, pods_waiting=dict(spec.pods_waiting))
        share = split.share if split.share is not None else expected_share(self.fleet.version, canary, baseline)
        pair = Pair(canary, baseline)
        state = self._state.setdefault(pair, PairState())
        v = self._ended(state, judge(self.spec, canary=canary, baseline=baseline, canary_data=c, baseline_data=b,
                                     expected_share=share if split.check else None, now=now,
                                     step_seconds=step_seconds,
                                     elapsed_seconds=None if since is None else now - since,
                                     objectives=self.objectives), now)
        state.latest, state.arms = v, (c, b)
        if self.events is not None:
            self.events.emit(verdict_event(v), sampled=False)
        self.evaluations[(canary, baseline, str(v.verdict))] += 1
        if c.note or b.note:
            self.source_errors[(canary, baseline)] += 1
        return v

    def _ended(self, state: PairState, v: Verdict, now: float) -> Verdict:
        """`v` with how long the pair has been undecided; past canary.end.after_seconds with `then: fail`, a
        fail naming the policy (every gate rolls back); with `hold` it stays undecided (the alert pages)."""
        if v.verdict in (Outcome.PASS, Outcome.FAIL):
            state.undecided_since = None
            return v
        # A new analysis (a new revision's window) starts the clock again.
        start = max(now if state.undecided_since is None else state.undecided_since,
                    -math.inf if state.analysis_start is None else state.analysis_start)
        state.undecided_since = start
        end = self.spec.end
        waited = max(0.0, now - start)
        if end.then != "fail" or end.after_seconds is None or waited < end.after_seconds:
            return replace(v, undecided_seconds=waited)
        return replace(v, verdict=Outcome.FAIL, undecided_seconds=waited,
                       reason=f"undecided for {waited:.0f} s, over canary.end.after_seconds ({end.after_seconds:g} "
                              f"s): failed by policy (canary.end.then: fail), so the gates roll it back; last "
                              f"look: {v.reason}")

    async def verdict_for(self, canary: str | None, baseline: str | None, *, since: float | None,
                          weight: str | None, step_seconds: float | None = None) -> Verdict:
        """The API's answer: a fresh verdict, nodata (with the reason) for unknown or missing names.

        `weight`: the canary's expected traffic share as a fraction (0.05) or an Argo percentage (5);
        empty or absent: from the versions' expected_traffic_weight (configured, or the Rollout's step);
        `any`: no split check. `canary`/`baseline` may be a role (`canary`, `stable`, `GROUP:ROLE`).
        `step_seconds`: the step's planned length from `since` (else from the gate's first ask of this step);
        absent: canary.step_seconds."""
        versions = self.fleet.versions()
        canary = None if canary is None else resolve_alias(canary, versions)
        baseline = None if baseline is None else resolve_alias(baseline, versions)
        if canary is None and baseline is None and len(self.pairs) == 1:
            canary, baseline = self.pairs[0].canary, self.pairs[0].baseline
        if canary is None or baseline is None:
            known = ", ".join(f"canary={p.canary}&baseline={p.baseline}" for p in self.pairs) or "none"
            return self._nodata(canary or "", baseline or "", f"pass canary and baseline; configured: {known}")
        unknown = tuple(n for n in (canary, baseline) if self.fleet.version(n) is None)
        if unknown:
            return replace(self._nodata(canary[:63], baseline[:63], f"{UNKNOWN_VERSIONS}: {', '.join(unknown)}"),
                           unknown=unknown)
        if canary == baseline:
            return self._nodata(canary, baseline, "canary and baseline are the same version")
        split = parse_split(weight)
        if isinstance(split, str):
            return self._nodata(canary, baseline, split)
        state = self._state.setdefault(Pair(canary, baseline), PairState())
        step_seconds = step_seconds if step_seconds is not None else self.spec.step_seconds
        state.step_seconds, state.split = step_seconds, split
        if step_seconds is not None and since is None:
            since = self._step_started(state, split, step_seconds)
        if since is not None and (state.analysis_start is None or since > state.analysis_start):
            state.analysis_start = min(since, self.clock())
        return await self.evaluate(canary, baseline, since=since, split=split, step_seconds=step_seconds)

    def _step_started(self, state: PairState, split: Split, step_seconds: float) -> float:
        """When the gate's current step began: its first ask with this split and length, unless the gate went
        quiet for STEP_FORGET_SECONDS or asked for another step since (then now). After a restart of this
        process the step starts again, which holds the gate longer and never passes it sooner."""
        now = self.clock()
        seen = state.step
        same = seen is not None and (seen.split, seen.step_seconds) == (split, step_seconds) \
            and now - seen.last_ask <= STEP_FORGET_SECONDS
        state.step = StepAsk(split, step_seconds, started=seen.started if same and seen else now, last_ask=now)
        return state.step.started

    def _nodata(self, canary: str, baseline: str, reason: str) -> Verdict:
        return judge(self.spec, canary=canary, baseline=baseline, canary_data=ArmData(note=reason),
                     baseline_data=ArmData(note=reason), expected_share=None, now=self.clock())

    async def run_once(self) -> None:
        """Judge every configured pair (the periodic job), as its gate last asked."""
        for p in self.pairs:
            state = self._state.get(p, PairState())
            v = await self.evaluate(p.canary, p.baseline, since=state.analysis_start, split=state.split,
                                    step_seconds=state.step_seconds)
            if v.verdict is Outcome.FAIL:
                log.warning("canary %s vs %s: fail: %s", p.canary, p.baseline, v.reason)
