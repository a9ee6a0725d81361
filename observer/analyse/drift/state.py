"""Drift results (contract 6) and the state the drift area serves to the canary judge (`wiring.root.Services.drift`).

Persistence gating happens here: a window whose p-value is below alpha is "shifted"; a field is flagged
`drift` only after `consecutive` shifted windows in a row against the same baseline (a raw α = 0.05 test
run 96 times a day alarms almost daily; two consecutive windows at p < 0.01 about once in a hundred days).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from observer import jsonsafe
from observer.analyse.drift.baseline import BaselineMeta
from observer.analyse.drift.explain import ShiftedExample
from observer.analyse.drift.scalar import FeatureResult

Status = Literal["ok", "insufficient_data", "no_baseline", "error"]


@dataclass(frozen=True)
class DriftResult:
    """One field's (prompts, outputs or a scalar feature) latest test against the active baseline."""

    field: str
    statistic: float
    p_value: float
    drift: bool
    n_current: int
    n_baseline: int
    method: str
    status: Status
    shifted: bool = False  # this window alone is below alpha
    streak: int = 0  # consecutive shifted windows (against this baseline)
    p_adjusted: float | None = None  # BH-adjusted, scalar features only
    effect_size: float | None = None
    effect: str = ""


@dataclass(frozen=True)
class DriftReport:
    """Everything one check of one version found, for the API, the CLI and the HTML report."""

    version: str
    model: str
    checked_at: float
    status: Status
    message: str = ""
    since: float | None = None
    until: float | None = None
    embedder: str = ""
    baseline_hash: str | None = None
    baseline: BaselineMeta | None = None
    results: Mapping[str, DriftResult] = field(default_factory=dict)
    features: tuple[FeatureResult, ...] = ()
    examples: Mapping[str, tuple[ShiftedExample, ...]] = field(default_factory=dict)

    def moved(self) -> list[str]:
        """Fields flagged as drifted."""
        return sorted(k for k, r in self.results.items() if r.drift)

    def as_json(self) -> dict[str, Any]:
        """A JSON-safe dict (NaN and infinities become null)."""
        out: dict[str, Any] = jsonsafe.strict(asdict(self) | {"moved": self.moved()})
        return out


class DriftState:
    """The latest gated report per version; thread-safe (checks run in a worker thread)."""

    def __init__(self, *, consecutive: int) -> None:
        if consecutive < 1:
            raise ValueError("consecutive must be >= 1")
        self.consecutive = consecutive
        self._reports: dict[str, DriftReport] = {}
        self._streaks: dict[tuple[str, str], tuple[str | None, int]] = {}
        self._lock = threading.Lock()

    def record(self, report: DriftReport) -> DriftReport:
        """Apply persistence gating to a fresh (ungated) report, store it and return the gated copy."""
        with self._lock:
            gated: dict[str, DriftResult] = {}
            for name, r in report.results.items():
                key = (report.version, name)
                last_hash, streak = self._streaks.get(key, (None, 0))
                if last_hash != report.baseline_hash:
                    streak = 0  # a new baseline starts a new run of windows
                streak = streak + 1 if (r.status == "ok" and r.shifted) else 0
                self._streaks[key] = (report.baseline_hash, streak)
                gated[name] = replace(r, streak=streak, drift=r.status == "ok" and streak >= self.consecutive)
            out = replace(report, results=gated)
            self._reports[report.version] = out
            return out

    def latest(self, version: str) -> dict[str, DriftResult]:
        """Field → latest result of `version` (empty before its first check)."""
        with self._lock:
            report = self._reports.get(version)
            return dict(report.results) if report else {}

    def report(self, version: str) -> DriftReport | None:
        """The latest full report of `version`."""
        with self._lock:
            return self._reports.get(version)

    def versions(self) -> list[str]:
        """Versions checked at least once."""
        with self._lock:
            return sorted(self._reports)

    def forget(self, keep: set[str]) -> None:
        """Drop versions not in `keep` (a version removed from the config stops being exported)."""
        with self._lock:
            for v in [v for v in self._reports if v not in keep]:
                del self._reports[v]
            for key in [k for k in self._streaks if k[0] not in keep]:
                del self._streaks[key]
