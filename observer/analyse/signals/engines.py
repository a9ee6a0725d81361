"""The engine state of each replica from its scrapes: unhealthy (vLLM's `engine_healthy` 0), asleep (sleep mode)
or hung (requests running, none finished for `hung_after_seconds`: /health stays green while nothing moves).
Kept apart from the SignalStore, which asks it once per replica per cycle."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from observer.collect.model import ModelMetrics
from observer.collect.scraper import ScrapeResult, Target
from observer.conventions.labels import EngineState
from observer.conventions.vllm import E2E, REQUEST_SUCCESS, RUNNING


class EngineProgress:
    """When each target last finished a request, or last had none running (an idle engine is not hung)."""

    def __init__(self, hung_after_seconds: float) -> None:
        self.hung_after_seconds = hung_after_seconds
        self._progress: dict[Target, tuple[float, float]] = {}  # target → (finished requests seen, since when)

    def track(self, target: Target, result: ScrapeResult, ts: float) -> None:
        assert result.vllm is not None
        finished = running = 0.0
        for m in result.vllm.models.values():
            by_reason = m.labelled_counters.get(REQUEST_SUCCESS)
            e2e = m.histograms.get(E2E)
            finished += sum(by_reason.values()) if by_reason else (e2e.count if e2e is not None else 0.0)
            running += m.gauges.get(RUNNING, 0.0)
        seen = self._progress.get(target)
        if seen is None or running <= 0 or finished != seen[0]:
            self._progress[target] = (finished, ts)

    def hung(self, target: Target, ts: float) -> bool:
        seen = self._progress.get(target)
        return seen is not None and ts - seen[1] >= self.hung_after_seconds

    def forget(self, keep: Iterable[Target]) -> None:
        """Drop the targets no version watches any more."""
        kept = set(keep)
        for t in [t for t in self._progress if t not in kept]:
            del self._progress[t]


def replica_states(models: Sequence[ModelMetrics], *, hung: bool) -> set[EngineState]:
    """The states of one replica that answered its scrape, from the models it serves for the version."""
    states = set()
    if any((m.engines_unhealthy or 0) > 0 for m in models):
        states.add(EngineState.UNHEALTHY)
    if models and all(m.engines_asleep is not None and m.engines_asleep >= m.engines for m in models):
        states.add(EngineState.ASLEEP)
    if hung:
        states.add(EngineState.HUNG)
    return states


def count_states(replicas: Iterable[set[EngineState]]) -> Mapping[EngineState, int]:
    """Replicas per state (states with none left out)."""
    counts: Counter[EngineState] = Counter()
    for states in replicas:
        counts.update(states)
    return dict(counts)
