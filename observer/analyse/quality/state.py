"""The quality area's shared state (contract 5): latest golden runs, cumulative totals, live-check events.

Written by the asyncio jobs, read by the collector (HTTP thread) and by other areas: every access
holds one lock, and every history is bounded.
"""

from __future__ import annotations

import bisect
import threading
from collections import Counter, deque
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field

from observer.analyse.quality.model import GoldenRunResult

MAX_RUNS_KEPT = 2000  # per (version, golden set): summaries for golden_totals(since=…)
MAX_LIVE_EVENTS = 200_000  # per (version, check)


@dataclass(frozen=True)
class RunSummary:
    """What golden_totals needs of a past run."""

    started: float
    passed: int
    scored: int
    judge_errors: int = 0


@dataclass
class GoldenTotals:
    """Cumulative counts for one (version, golden set): monotonic, exported as counters."""

    items: int = 0
    passed: int = 0
    judge_errors: int = 0
    unscored: Counter[str] = field(default_factory=Counter)
    latency_count: int = 0  # client-side timings of answered requests, for the summaries' _count/_sum
    latency_sum: float = 0.0
    ttft_count: int = 0
    ttft_sum: float = 0.0


@dataclass
class LiveTotals:
    """Cumulative counts and a bounded event log for one (version, check)."""

    total: int = 0
    failures: int = 0
    events: deque[tuple[float, bool]] = field(default_factory=lambda: deque(maxlen=MAX_LIVE_EVENTS))


@dataclass(frozen=True)
class Snapshot:
    """A consistent copy for the collector."""

    golden_latest: dict[tuple[str, str], GoldenRunResult]
    golden_totals: dict[tuple[str, str], GoldenTotals]
    live: dict[tuple[str, str], tuple[int, int, int, int]]  # total, failures, window total, window failures


class QualityState:
    """Latest results and totals per version; the QUALITY service other areas read."""

    def __init__(self, *, versions: Sequence[str], golden_sets: Sequence[str], live_checks: Sequence[str],
                 live_versions: Sequence[str] | None = None) -> None:
        """`versions` are replayed (zero counts exported from the start); live checks cover `live_versions`
        (default: the same versions)."""
        self._lock = threading.Lock()
        self._golden_sets = tuple(golden_sets)
        self._live_checks = tuple(live_checks)
        self._latest: dict[tuple[str, str], GoldenRunResult] = {}
        self._runs: dict[tuple[str, str], deque[RunSummary]] = {}
        self._golden: dict[tuple[str, str], GoldenTotals] = {(v, g): GoldenTotals() for v in versions
                                                             for g in golden_sets}
        self._live: dict[tuple[str, str], LiveTotals] = {
            (v, c): LiveTotals() for v in (versions if live_versions is None else live_versions) for c in live_checks}

    def follow(self, replayed: Collection[str], live: Collection[str]) -> None:
        """Track the fleet now: a new version is exported with zero counts from the start, a version that left
        is dropped (its series end). A promoted canary keeps its name, so it keeps its windows."""
        with self._lock:
            for v in replayed:
                for g in self._golden_sets:
                    self._golden.setdefault((v, g), GoldenTotals())
            for v in live:
                for c in self._live_checks:
                    self._live.setdefault((v, c), LiveTotals())
            here = set(replayed) | set(live)
            for table in (self._golden, self._live, self._latest, self._runs):
                for key in [k for k in table if k[0] not in here]:
                    del table[key]

    def record_golden(self, result: GoldenRunResult) -> None:
        """Add one run: totals grow by its scored items; a completed run becomes the latest."""
        key = (result.version, result.golden_set)
        with self._lock:
            totals = self._golden.setdefault(key, GoldenTotals())
            totals.items += result.scored
            totals.passed += result.passed
            totals.judge_errors += result.judge_errors
            totals.unscored.update(result.unscored)
            lat, ttft = result.latencies("latency"), result.latencies("ttft")
            totals.latency_count += len(lat)
            totals.latency_sum += sum(lat)
            totals.ttft_count += len(ttft)
            totals.ttft_sum += sum(ttft)
            if result.completed:
                self._latest[key] = result
                runs = self._runs.setdefault(key, deque(maxlen=MAX_RUNS_KEPT))
                runs.append(RunSummary(result.started, result.passed, result.scored, result.judge_errors))

    def record_live(self, version: str, check: str, events: Iterable[tuple[float, bool]]) -> None:
        """Add live-check results as (sample timestamp, failed) pairs."""
        with self._lock:
            totals = self._live.setdefault((version, check), LiveTotals())
            for ts, failed in events:
                totals.total += 1
                totals.failures += int(failed)
                totals.events.append((ts, failed))

    def latest(self, version: str) -> dict[str, GoldenRunResult]:
        """The latest completed run of each golden set for `version`."""
        with self._lock:
            return {g: r for (v, g), r in self._latest.items() if v == version}

    def golden_totals(self, version: str, *, since: float, golden_set: str | None = None) -> tuple[int, int]:
        """(passed, scored) over the completed runs of `version` started at or after `since`."""
        passed = scored = 0
        with self._lock:
            for (v, g), runs in self._runs.items():
                if v != version or (golden_set is not None and g != golden_set):
                    continue
                for r in runs:
                    if r.started >= since:
                        passed += r.passed
                        scored += r.scored
        return passed, scored

    def golden_judge_errors(self, version: str, *, since: float, golden_set: str | None = None) -> int:
        """Items the judge failed to score in the completed runs of `version` started at or after `since`."""
        with self._lock:
            return sum(r.judge_errors for (v, g), runs in self._runs.items()
                       if v == version and (golden_set is None or g == golden_set) for r in runs if r.started >= since)

    def live_check_totals(self, version: str, check: str, *, since: float) -> tuple[int, int]:
        """(failures, total) of live check `check` on samples of `version` timestamped at or after `since`."""
        with self._lock:
            totals = self._live.get((version, check))
            if totals is None:
                return 0, 0
            window = [failed for ts, failed in totals.events if ts >= since]
        return sum(window), len(window)

    def live_check_slices(self, version: str, check: str, *, edges: Sequence[float]) -> list[tuple[int, int]]:
        """(failures, total) of live check `check` per slice [edges[i], edges[i+1]), in one pass over the
        events (the canary judge asks for every slice of its window at every look)."""
        out = [[0, 0] for _ in range(max(len(edges) - 1, 0))]
        with self._lock:
            totals = self._live.get((version, check))
            events = () if totals is None or not out else totals.events
            for ts, failed in events:
                i = bisect.bisect_right(edges, ts) - 1
                if 0 <= i < len(out):
                    out[i][0] += int(failed)
                    out[i][1] += 1
        return [(f, n) for f, n in out]

    def snapshot(self, *, live_since: float) -> Snapshot:
        """Copy everything the collector exports; live window ratios count samples since `live_since`."""
        with self._lock:
            live = {}
            for key, t in self._live.items():
                window = [failed for ts, failed in t.events if ts >= live_since]
                live[key] = (t.total, t.failures, len(window), sum(window))
            golden = {k: GoldenTotals(t.items, t.passed, t.judge_errors, Counter(t.unscored), t.latency_count,
                                      t.latency_sum, t.ttft_count, t.ttft_sum) for k, t in self._golden.items()}
            return Snapshot(golden_latest=dict(self._latest), golden_totals=golden, live=live)
