"""A baseline's own noise, measured when it is pinned: its contiguous windows of the production window's length,
each tested against the rest of the baseline exactly as a live window is tested against all of it.

Two numbers come out per field. The share of those windows the test flags is the baseline's own false-alarm
rate: near alpha when its traffic is steady, higher when its hours differ (a daily cycle, a campaign), which
the persistence rule then pays for. The 95th percentile of their statistics (MMD², KS D, Cramér's V) is how far
the baseline's own hours wander from the rest: a live window's effect size is its statistic over that, so a
shift smaller than the baseline's own hour-to-hour wander is never an alert, however many samples show it.

A window holds the units whose first sample falls in it: a conversation that crosses a window's edge moves
with its first turn, never split between the window and the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from observer.analyse.drift.baseline import Baseline
from observer.analyse.drift.mmd import median_sq_distance
from observer.analyse.drift.scalar import compare_features
from observer.analyse.drift.units import MIN_UNITS, Units, kernel_sums, mmd_statistic, relabel

MIN_WINDOWS = 4
"""Windows a baseline must span for its own false-alarm rate to be measured at all."""
SPREAD_QUANTILE = 0.95
FEATURES = "features"
"""The calibration's key for the scalar features tested together (BH at feature_alpha)."""


@dataclass(frozen=True)
class Calibration:
    """What a baseline's own windows showed (as_json is stored in its metadata, covered by its hash)."""

    window_seconds: float
    windows: int
    flagged: Mapping[str, int] = field(default_factory=dict)
    """Per field (`features`: any scalar feature): windows the test flagged."""
    spread: Mapping[str, float] = field(default_factory=dict)
    """Per field or feature: the 95th percentile of the windows' statistic (MMD², KS D, Cramér's V)."""
    note: str = ""
    """Why it was not measured (too short a baseline), with the fix; empty when it was."""

    def rate(self, name: str) -> float | None:
        """The share of the baseline's windows flagged for `name` (None: not measured)."""
        if not self.windows or name not in self.flagged:
            return None
        return self.flagged[name] / self.windows

    def as_json(self) -> dict[str, Any]:
        """The stored form."""
        return {"window_seconds": self.window_seconds, "windows": self.windows, "flagged": dict(self.flagged),
                "spread": dict(self.spread), "note": self.note}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Calibration | None:
        """The calibration a baseline's metadata holds, or None (pinned before baselines measured their noise)."""
        if not data:
            return None
        return cls(window_seconds=float(data.get("window_seconds", 0.0)), windows=int(data.get("windows", 0)),
                   flagged={str(k): int(v) for k, v in dict(data.get("flagged") or {}).items()},
                   spread={str(k): float(v) for k, v in dict(data.get("spread") or {}).items()},
                   note=str(data.get("note", "")))


def windows_of(baseline: Baseline, units: Units, window_seconds: float) -> list[np.ndarray]:
    """Per contiguous window of `window_seconds` from the baseline's first sample: the units whose first sample
    falls in it."""
    assert baseline.ts is not None
    first = np.full(units.count, np.inf)
    np.minimum.at(first, units.index, baseline.ts)
    slot = np.floor((first - float(baseline.ts.min())) / window_seconds).astype(np.int64)
    return [np.flatnonzero(slot == s) for s in range(int(slot.max()) + 1)]


def calibrate(baseline: Baseline, *, window_seconds: float, slice_seconds: float, alpha: float,
              feature_alpha: float, permutations: int, min_samples: int, seed: int) -> Calibration:
    """The baseline's own windows against the rest of it, every field as a live check tests it."""
    units = baseline.units(slice_seconds)
    wins = [w for w in windows_of(baseline, units, window_seconds) if w.size >= MIN_UNITS]
    wins = [w for w in wins if units.count - w.size >= MIN_UNITS]
    if len(wins) < MIN_WINDOWS:
        assert baseline.ts is not None
        span = float(baseline.ts.max() - baseline.ts.min())
        return Calibration(window_seconds=window_seconds, windows=0, note=(
            f"the baseline spans {span / 3600.0:.1f} h: measuring its own false-alarm rate needs {MIN_WINDOWS} "
            f"windows of {window_seconds / 3600.0:g} h with {MIN_UNITS} units each; pin over a longer period"))
    sizes = units.sizes()
    flagged: dict[str, int] = {}
    stats: dict[str, list[float]] = {}
    for name, emb in baseline.embeddings.items():
        gamma = 1.0 / (2.0 * median_sq_distance(emb, seed=seed))
        k = kernel_sums(emb, units.index, units.count, emb, units.index, units.count, gamma=gamma)
        for i, w in enumerate(wins):
            rest = np.setdiff1d(np.arange(units.count), w)
            order = np.concatenate([rest, w])  # the rest is the reference, as the baseline is to a window
            t = relabel(mmd_statistic(k[np.ix_(order, order)], sizes[order]), rest.size, sizes[order],
                        permutations=permutations, alpha=alpha, seed=seed + i)
            flagged[name] = flagged.get(name, 0) + int(t.p_value < alpha)
            stats.setdefault(name, []).append(t.statistic)
    for i, w in enumerate(wins):
        inside = np.isin(units.index, w)
        results = compare_features({k: v[~inside] for k, v in baseline.features.items()}, units.subset(~inside),
                                   {k: v[inside] for k, v in baseline.features.items()}, units.subset(inside),
                                   alpha=feature_alpha, min_samples=min(min_samples, int(inside.sum())),
                                   permutations=permutations, seed=seed + i)
        flagged[FEATURES] = flagged.get(FEATURES, 0) + int(any(r.drift for r in results))
        for r in results:
            if r.status == "ok":
                stats.setdefault(r.feature, []).append(r.effect_size)
    return Calibration(window_seconds=window_seconds, windows=len(wins), flagged=flagged,
                       spread={k: float(np.quantile(v, SPREAD_QUANTILE)) for k, v in stats.items() if v})
