"""The canary service: judges configured pairs on demand and on a schedule, keeps the latest verdicts."""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import replace

from observer.analyse.canary import absolute
from observer.analyse.canary.events import EvaluationSink, verdict_event
from observer.analyse.canary.judge import ArmData, Outcome, Verdict
from observer.analyse.canary.pairs import FleetPairs, Pair, expected_share, resolve_alias
from observer.analyse.canary.results import UNKNOWN_VERSIONS, Evidence
from observer.analyse.canary.sources import CanarySource
from observer.analyse.canary.verdict import judge
from observer.config.spec import ObserverConfig
from observer.fleetview import FleetView, LiveFleet

Clock = Callable[[], float]
log = logging.getLogger("observer.canary")

STEP_FORGET_SECONDS = 300.0
"""A step start taken from a gate's first ask (no `since`) is forgotten after this long without an ask of the
same step: the gate asks every interval while its analysis runs, so a silence this long ends the step."""


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
        self._latest: dict[Pair, Verdict] = {}
        # The data behind each latest verdict, for the report page: read, never re-queried.
        self._arms: dict[Pair, tuple[ArmData, ArmData]] = {}
        # The split the gate last asked about, per pair (Argo passes the step's setWeight): the periodic
        # judgment exported to Prometheus uses it too, so the gate's web and Prometheus metrics agree.
        self._asked_share: dict[Pair, float | None] = {}
        # The latest analysis start a gate asked with, per pair (`since`; Flagger's revision first seen): the
        # periodic judgment starts its window there too, so a version name reused across revisions (Flagger's
        # `<name>` against `<name>-primary`) is not judged on the previous revision's requests.
        self._analysis_start: dict[Pair, float] = {}
        # When each pair's current run of undecided looks began (canary.end: a canary that never decides ends).
        self._undecided_since: dict[Pair, float] = {}
        # The planned step length the gate last asked with, and the start of that step when the gate gave no
        # `since` (Argo's web metric cannot): its first ask, kept while it asks again (key: weight, length).
        self._asked_step: dict[Pair, float] = {}
        self._step_start: dict[Pair, tuple[tuple[str, float], float, float]] = {}
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
            for gone in [p for p in self._latest  # a pair whose version left: its verdict series end
                         if self.fleet.version(p.canary) is None or self.fleet.version(p.baseline) is None]:
                del self._latest[gone]
                self._arms.pop(gone, None)
                self._asked_share.pop(gone, None)
                self._analysis_start.pop(gone, None)
                self._undecided_since.pop(gone, None)
                self._asked_step.pop(gone, None)
                self._step_start.pop(gone, None)
        return pairs

    def latest(self, canary: str, baseline: str) -> Verdict | None:
        """The last verdict for the pair, or None before its first judgement."""
        return self._latest.get(Pair(canary, baseline))

    def evidence(self, canary: str, baseline: str) -> Evidence | None:
        """The last verdict for the pair with the data of both arms it was judged on, or None."""
        pair = Pair(canary, baseline)
        v, arms = self._latest.get(pair), self._arms.get(pair)
        if v is None or arms is None:
            return None
        return Evidence(verdict=v, canary=arms[0], baseline=arms[1])

    def looks(self, canary: str, baseline: str) -> int:
        """How many times the pair was judged (periodic job and gate asks) since this process started."""
        return sum(n for (c, b, _), n in self.evaluations.items() if c == canary and b == baseline)

    def verdicts(self) -> list[Verdict]:
        """The latest verdict of every judged pair."""
        return [self._latest[p] for p in sorted(self._latest, key=lambda p: (p.canary, p.baseline))]

    async def evaluate(self, canary: str, baseline: str, *, since: float | None = None,
                       weight: float | None = None, check_split: bool = True,
                       step_seconds: float | None = None) -> Verdict:
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
        share = weight if weight is not None else expected_share(self.fleet.version, canary, baseline)
        if not check_split:
            share = None
        planned = step_seconds if since is not None else None
        v = self._ended(Pair(canary, baseline), judge(self.spec, canary=canary, baseline=baseline, canary_data=c,
                                                      baseline_data=b, expected_share=share, now=now,
                                                      planned_seconds=planned,
                                                      elapsed_seconds=0.0 if since is None else now - since,
                                                      objectives=self.objectives), now)
        self._latest[Pair(canary, baseline)] = v
        self._arms[Pair(canary, baseline)] = (c, b)
        if self.events is not None:
            self.events.emit(verdict_event(v), sampled=False)
        self.evaluations[(canary, baseline, str(v.verdict))] += 1
        if c.note or b.note:
            self.source_errors[(canary, baseline)] += 1
        return v

    def _ended(self, pair: Pair, v: Verdict, now: float) -> Verdict:
        """`v` with how long the pair has been undecided; past canary.end.after_seconds with `then: fail`, a
        fail naming the policy (every gate rolls back); with `hold` it stays undecided (the alert pages)."""
        if v.verdict in (Outcome.PASS, Outcome.FAIL):
            self._undecided_since.pop(pair, None)
            return v
        start = max(self._undecided_since.setdefault(pair, now), self._analysis_start.get(pair, -math.inf))
        self._undecided_since[pair] = start  # a new analysis (a new revision's window) starts the clock again
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
        unknown = [n for n in (canary, baseline) if self.fleet.version(n) is None]
        if unknown:
            return self._nodata(canary[:63], baseline[:63], f"{UNKNOWN_VERSIONS}: {', '.join(unknown)}")
        if canary == baseline:
            return self._nodata(canary, baseline, "canary and baseline are the same version")
        text = (weight or "").strip().lower()
        pair = Pair(canary, baseline)
        step = step_seconds if step_seconds is not None else self.spec.step_seconds
        if step is None:
            self._asked_step.pop(pair, None)
        else:
            self._asked_step[pair] = step
            if since is None:
                since = self._step_started(pair, (text, step))
        if since is not None and since > self._analysis_start.get(pair, -math.inf):
            self._analysis_start[pair] = min(since, self.clock())
        if text == "any":
            return await self.evaluate(canary, baseline, since=since, check_split=False, step_seconds=step)
        if not text:
            self._asked_share.pop(Pair(canary, baseline), None)
        share: float | None = None
        if text:
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            share = value / 100.0 if value >= 1.0 else value
            if not 0.0 < share < 1.0:
                return self._nodata(canary, baseline, f"weight {text[:20]!r} is not a share in (0, 1), "
                                                      "a percentage in [1, 100), or 'any'")
            self._asked_share[Pair(canary, baseline)] = share
        return await self.evaluate(canary, baseline, since=since, weight=share, step_seconds=step)

    def _step_started(self, pair: Pair, key: tuple[str, float]) -> float:
        """When the gate's current step began: its first ask with this weight and length, unless the gate went
        quiet for STEP_FORGET_SECONDS or asked for another step since (then now). After a restart of this
        process the step starts again, which holds the gate longer and never passes it sooner."""
        now = self.clock()
        seen = self._step_start.get(pair)
        start = seen[1] if seen is not None and seen[0] == key and now - seen[2] <= STEP_FORGET_SECONDS else now
        self._step_start[pair] = (key, start, now)
        return start

    def _nodata(self, canary: str, baseline: str, reason: str) -> Verdict:
        return judge(self.spec, canary=canary, baseline=baseline, canary_data=ArmData(note=reason),
                     baseline_data=ArmData(note=reason), expected_share=None, now=self.clock())

    async def run_once(self) -> None:
        """Judge every configured pair (the periodic job)."""
        for p in self.pairs:
            v = await self.evaluate(p.canary, p.baseline, since=self._analysis_start.get(p),
                                    weight=self._asked_share.get(p), step_seconds=self._asked_step.get(p))
            if v.verdict is Outcome.FAIL:
                log.warning("canary %s vs %s: fail: %s", p.canary, p.baseline, v.reason)
