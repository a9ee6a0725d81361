"""Drift results (contract 6) and the state the drift area serves to the canary judge (`wiring.root.Services.drift`).

Persistence gating happens here: a window whose p-value is below alpha is "shifted"; a field is flagged
`drift` only after enough shifted windows in a row against the same baseline, and only when its effect reaches
`min_effect` (Persistence). A check every 15 minutes of the last hour runs 2,880 times in 30 days on windows
that overlap by three quarters: two shifted windows in a row are far likelier than alpha², and the rule is
sized to the configured false alarms per 30 days instead.
"""

from __future__ import annotations

import math
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
    relative_effect: float | None = None
    """The statistic (MMD², KS D, Cramér's V) ÷ the baseline's own windows' 95th percentile; None: not measured."""
    units: str = ""  # what the test took as independent units ("412 conversations", "6 time slices …")
    needed: int = 0  # shifted windows in a row that flag drift (Persistence)


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


@dataclass(frozen=True)
class Persistence:
    """How many shifted windows in a row flag drift: `fixed`, or sized to `budget` false alarms in 30 days.

    Windows `span` = ⌈window ÷ interval⌉ checks apart share no sample, so a run of 1 + span·(r − 1) shifted
    windows holds r disjoint ones, each shifted by chance with probability at most p (alpha, or the baseline's
    own measured rate when that is higher). With N checks in 30 days and G field groups (each embedding field,
    the scalar features together), N·G·p^r bounds the expected false alarms; r is the least that meets the
    budget. bench/drift_sessions.py measures the rule on 30 days of conversation traffic."""

    interval_seconds: float
    window_seconds: float
    alpha: float
    feature_alpha: float
    budget: float = 1.0
    fixed: int | None = None
    min_effect: float = 0.0

    def needed(self, report: DriftReport) -> int:
        """Shifted windows in a row that flag drift in `report`'s fields."""
        if self.fixed is not None:
            return self.fixed
        from observer.analyse.drift.calibrate import FEATURES, Calibration

        calibration = Calibration.from_json(report.baseline.calibration) if report.baseline else None
        embedded = [n for n, r in report.results.items() if r.method.startswith("units_mmd")]
        rates = [max(self.alpha, (calibration.rate(n) if calibration else None) or 0.0) for n in embedded]
        if len(embedded) < len(report.results):
            rates.append(max(self.feature_alpha, (calibration.rate(FEATURES) if calibration else None) or 0.0))
        p = min(max(rates, default=self.alpha), MAX_RATE)
        checks = 30 * 86_400.0 / self.interval_seconds
        span = math.ceil(self.window_seconds / self.interval_seconds)
        r = 1
        while checks * max(len(rates), 1) * p ** r > self.budget and r < MAX_DISJOINT:
            r += 1
        return 1 + span * (r - 1)


MAX_RATE = 0.5
"""A baseline's own false-alarm rate is taken at most this high (higher: pin another one; it says so)."""
MAX_DISJOINT = 20


class DriftState:
    """The latest gated report per version; thread-safe (checks run in a worker thread)."""

    def __init__(self, *, persistence: Persistence) -> None:
        self.persistence = persistence
        self._reports: dict[str, DriftReport] = {}
        self._streaks: dict[tuple[str, str], tuple[str | None, int]] = {}
        self._lock = threading.Lock()

    def record(self, report: DriftReport) -> DriftReport:
        """Apply persistence gating to a fresh (ungated) report, store it and return the gated copy."""
        needed = self.persistence.needed(report)
        floor = self.persistence.min_effect
        with self._lock:
            gated: dict[str, DriftResult] = {}
            for name, r in report.results.items():
                key = (report.version, name)
                last_hash, streak = self._streaks.get(key, (None, 0))
                if last_hash != report.baseline_hash:
                    streak = 0  # a new baseline starts a new run of windows
                streak = streak + 1 if (r.status == "ok" and r.shifted) else 0
                self._streaks[key] = (report.baseline_hash, streak)
                large = r.relative_effect is None or r.relative_effect >= floor
                gated[name] = replace(r, streak=streak, needed=needed,
                                      drift=r.status == "ok" and streak >= needed and large)
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
