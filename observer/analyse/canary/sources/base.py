"""What both canary sources share: the readers they are given, their protocol, and what the metrics read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Protocol, assert_never

from observer import conventions as names
from observer.analyse.canary.judge import ArmData, PairCounts
from observer.analyse.canary.results import FeedbackWindow
from observer.analyse.drift.state import DriftResult
from observer.analyse.signals import SliceTotals, VersionSignals
from observer.collect.model import Histogram
from observer.config.canary import CanaryMetricSpec, MetricKind
from observer.conventions import routers
from observer.conventions.vllm import LatencyId
from observer.errors import ObserverError


class SignalsReader(Protocol):
    """What the canary reads from the scrape area's per-version signals (observer.analyse.signals.SignalStore)."""

    def histogram_delta(self, version: str, family: str, *, since: float) -> Histogram | None: ...

    def labelled_counter_delta(self, version: str, family: str, *, since: float) -> dict[str, float] | None: ...

    def served_models(self, version: str) -> dict[str, dict[str, str]]: ...

    def slices(self, version: str, *, since: float, until: float, step: float, histograms: Sequence[str],
               labelled: Sequence[str]) -> Sequence[SliceTotals] | None: ...

    def latest(self, version: str) -> VersionSignals | None: ...


class QualityReader(Protocol):
    """What the canary reads from the quality area (observer.analyse.quality.state.QualityState)."""

    def golden_totals(self, version: str, *, since: float, golden_set: str | None = None) -> tuple[int, int]: ...

    def golden_judge_errors(self, version: str, *, since: float, golden_set: str | None = None) -> int: ...

    def live_check_totals(self, version: str, check: str, *, since: float) -> tuple[int, int]: ...

    def live_check_slices(self, version: str, check: str, *, edges: Sequence[float]) -> list[tuple[int, int]]: ...


class PairsReader(Protocol):
    """What the canary reads from shadow replay (observer.analyse.quality.shadow.ShadowReplayer)."""

    def paired_outcomes(self, canary: str, *, since: float) -> tuple[list[Mapping[str, str]], str,
                                                                      dict[str, str]]: ...


def paired_counts(outcomes: Sequence[Mapping[str, str]], checks: set[str]) -> dict[str, PairCounts]:
    """Tally per-pair outcomes (win, loss, tie, inconsistent, error) into counts per paired check."""
    tally: dict[str, Counter[str]] = {c: Counter() for c in checks}
    for row in outcomes:
        for check in checks:
            if check in row:
                tally[check][row[check]] += 1
    return {c: PairCounts(wins=t["win"], losses=t["loss"], ties=t["tie"], inconsistent=t["inconsistent"],
                          errors=t["error"]) for c, t in tally.items()}


class FeedbackReader(Protocol):
    """What the canary reads of users' feedback (observer.analyse.canary.sources.feedback.StoreFeedback)."""

    def window(self, version: str, *, since: float, now: float, step: float) -> FeedbackWindow: ...


class DriftReader(Protocol):
    """What the canary reads from the drift area (observer.analyse.drift.state.DriftState)."""

    def latest(self, version: str) -> dict[str, DriftResult]: ...


class CostReader(Protocol):
    """Cost per generated token of a version over a window (the scrape area's cost meter)."""

    def cost_per_million_tokens(self, version: str, *, since: float) -> float | None: ...


class SourceError(ObserverError):
    """A data source could not answer; the verdict becomes nodata with this reason (never an HTTP error)."""


class CanarySource(Protocol):
    """Where the judge reads one version's window."""

    name: str

    async def arm(self, version: str, metrics: Sequence[CanaryMetricSpec], *, since: float, now: float,
                  with_drift: bool) -> ArmData: ...


def needs(metrics: Sequence[CanaryMetricSpec]) -> tuple[set[LatencyId], set[str], set[str], set[str]]:
    """What the metrics read: latency families, golden sets ("" for all), live checks and drift fields."""
    families: set[LatencyId] = set()
    golden: set[str] = set()
    checks: set[str] = set()
    fields: set[str] = set()
    for m in metrics:
        match m.kind:
            case MetricKind.LATENCY:
                families.update([m.family] if m.family is not None else [])
            case MetricKind.QUALITY:
                golden.add(m.golden_set or "")
            case MetricKind.RATIO:
                checks.update([m.live_check] if m.live_check is not None else [])
            case MetricKind.DRIFT:
                fields.update([m.field] if m.field is not None else [])
            case MetricKind.COST | MetricKind.PAIRED | MetricKind.FEEDBACK:  # their own readers, asked apart
                pass
            case _:
                assert_never(m.kind)
    return families, golden, checks, fields


ENVIRONMENT_KEYS = (names.GPU_MODEL, names.GPU_DRIVER, names.ENGINE_ARGS, names.ENGINE_VERSION, names.WEIGHTS)


def as_finished(routed: Mapping[str, float] | None) -> dict[str, float] | None:
    """The router's requests by outcome as vLLM's by finished reason (routers.AS_FINISHED)."""
    return None if routed is None else {routers.AS_FINISHED.get(str(k), "error"): v for k, v in routed.items()}
