"""Per-feature drift tests, with Benjamini-Hochberg across the features tested together and an effect size (KS D,
Cramér's V) beside every p-value. The p-values relabel whole units (observer.analyse.drift.units): a mean-rank
difference for continuous features, chi-square for categorical ones; the token counts of one conversation's
turns are alike, and a test on single samples takes that for drift."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from observer.analyse.drift.features import FEATURES, Column, Kind
from observer.analyse.drift.units import MIN_UNITS, Units, column_test

Status = Literal["ok", "insufficient_data"]


@dataclass(frozen=True)
class FeatureResult:
    """The test of one scalar feature; `p_adjusted` is the BH-adjusted p-value used for `drift`."""

    feature: str
    kind: Kind
    method: str
    statistic: float
    p_value: float
    p_adjusted: float
    drift: bool
    effect_size: float
    effect: str  # what `effect_size` is: ks_d (max CDF gap) or cramers_v
    baseline_summary: Mapping[str, float]
    current_summary: Mapping[str, float]
    n_baseline: int
    n_current: int
    status: Status


def ks_d(ref: npt.NDArray[Any], cur: npt.NDArray[Any]) -> float:
    """The largest gap between the two empirical CDFs (KS D)."""
    from scipy import stats  # lazy: ~60 MB of RSS, only needed when a check runs
    return float(stats.ks_2samp(ref, cur, alternative="two-sided", method="asymp").statistic)


def _summary_continuous(x: npt.NDArray[Any]) -> dict[str, float]:
    return {"median": float(np.median(x)), "p90": float(np.quantile(x, 0.9)), "mean": float(np.mean(x))}


def cramers_v(ref: npt.NDArray[Any], cur: npt.NDArray[Any]) -> float:
    """Cramér's V of the 2 × categories table (0: the same shares)."""
    cats = sorted(set(ref.tolist()) | set(cur.tolist()))
    if len(cats) < 2:
        return 0.0  # one category on both sides: nothing moved
    table = np.array([[np.count_nonzero(ref == c) for c in cats], [np.count_nonzero(cur == c) for c in cats]],
                     dtype=np.float64)
    expected = table.sum(axis=1, keepdims=True) * table.sum(axis=0, keepdims=True) / table.sum()
    chi2 = float(np.sum((table - expected) ** 2 / expected))
    return float(np.sqrt(chi2 / table.sum()))


def _summary_categorical(x: npt.NDArray[Any]) -> dict[str, float]:
    values, counts = np.unique(x, return_counts=True)
    return {str(v): float(c) / len(x) for v, c in zip(values, counts, strict=True)}


def compare_features(baseline: Mapping[str, Column], baseline_units: Units, current: Mapping[str, Column],
                     current_units: Units, *, alpha: float, min_samples: int, permutations: int, seed: int
                     ) -> list[FeatureResult]:
    """Test every feature present on both sides, relabelling whole units; BH across the features that had
    enough data (at least `min_samples` values and MIN_UNITS units a side)."""
    from scipy import stats  # lazy: ~60 MB of RSS, only needed when a check runs
    Row = tuple[str, Kind, str, float, float, float, str, dict[str, float], dict[str, float], int, int]
    partial: list[Row] = []
    short: list[FeatureResult] = []
    for i, name in enumerate(sorted(set(baseline) & set(current))):
        kind = FEATURES.get(name, "continuous")
        ref, cur = np.asarray(baseline[name]), np.asarray(current[name])
        ok_r = np.isfinite(ref.astype(np.float64)) if kind == "continuous" else np.ones(len(ref), dtype=bool)
        ok_c = np.isfinite(cur.astype(np.float64)) if kind == "continuous" else np.ones(len(cur), dtype=bool)
        units_r, units_c = baseline_units.subset(ok_r), current_units.subset(ok_c)
        method = "units_rank" if kind == "continuous" else "units_chi2"
        if (ok_r.sum() < min_samples or ok_c.sum() < min_samples or units_r.count < MIN_UNITS
                or units_c.count < MIN_UNITS):
            short.append(FeatureResult(name, kind, method, float("nan"), 1.0, 1.0, False, 0.0, "", {}, {},
                                       int(ok_r.sum()), int(ok_c.sum()), "insufficient_data"))
            continue
        t = column_test(ref, baseline_units, cur, current_units, categorical=kind == "categorical",
                        permutations=permutations, alpha=alpha, seed=seed + i)
        r, c = ref[ok_r], cur[ok_c]
        if kind == "continuous":
            r, c = r.astype(np.float64), c.astype(np.float64)
            partial.append((name, kind, method, t.statistic, t.p_value, ks_d(r, c), "ks_d", _summary_continuous(r),
                            _summary_continuous(c), len(r), len(c)))
        else:
            partial.append((name, kind, method, t.statistic, t.p_value, cramers_v(r, c), "cramers_v",
                            _summary_categorical(r), _summary_categorical(c), len(r), len(c)))
    adjusted = (stats.false_discovery_control([p[4] for p in partial], method="bh") if partial else [])
    done = [
        FeatureResult(name, kind, method, stat, p, float(q), bool(q < alpha), eff, eff_name, bs, cs, nb, nc, "ok")
        for (name, kind, method, stat, p, eff, eff_name, bs, cs, nb, nc), q in zip(partial, adjusted, strict=True)
    ]
    return sorted(done + short, key=lambda r: r.feature)
