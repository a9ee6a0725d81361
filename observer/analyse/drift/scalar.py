"""Per-feature drift tests: KS for continuous features, chi-square for categorical ones, with
Benjamini-Hochberg across the features tested together, and an effect size beside every p-value."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from observer.analyse.drift.features import FEATURES, Column, Kind

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


def _continuous(ref: npt.NDArray[Any], cur: npt.NDArray[Any]) -> tuple[float, float]:
    from scipy import stats  # lazy: ~60 MB of RSS, only needed when a check runs
    r = stats.ks_2samp(ref, cur, alternative="two-sided", method="auto")
    return float(r.statistic), float(r.pvalue)


def _summary_continuous(x: npt.NDArray[Any]) -> dict[str, float]:
    return {"median": float(np.median(x)), "p90": float(np.quantile(x, 0.9)), "mean": float(np.mean(x))}


def _categorical(ref: npt.NDArray[Any], cur: npt.NDArray[Any]) -> tuple[float, float, float]:
    from scipy import stats  # lazy: ~60 MB of RSS, only needed when a check runs
    cats = sorted(set(ref.tolist()) | set(cur.tolist()))
    table = np.array([[np.count_nonzero(ref == c) for c in cats], [np.count_nonzero(cur == c) for c in cats]],
                     dtype=np.float64)
    if len(cats) < 2:
        return 0.0, 1.0, 0.0  # one category on both sides: nothing moved
    chi2, p, _, _ = stats.chi2_contingency(table, correction=len(cats) == 2)
    v = float(np.sqrt(chi2 / (table.sum() * (min(table.shape) - 1))))
    return float(chi2), float(p), v


def _summary_categorical(x: npt.NDArray[Any]) -> dict[str, float]:
    values, counts = np.unique(x, return_counts=True)
    return {str(v): float(c) / len(x) for v, c in zip(values, counts, strict=True)}


def compare_features(baseline: Mapping[str, Column], current: Mapping[str, Column], *, alpha: float,
                  min_samples: int) -> list[FeatureResult]:
    """Test every feature present on both sides; BH across the features that had enough data."""
    from scipy import stats  # lazy: ~60 MB of RSS, only needed when a check runs
    Row = tuple[str, Kind, str, float, float, float, str, dict[str, float], dict[str, float], int, int]
    partial: list[Row] = []
    short: list[FeatureResult] = []
    for name in sorted(set(baseline) & set(current)):
        kind = FEATURES.get(name, "continuous")
        ref, cur = np.asarray(baseline[name]), np.asarray(current[name])
        if kind == "continuous":
            ref = ref.astype(np.float64)
            cur = cur.astype(np.float64)
            ref, cur = ref[np.isfinite(ref)], cur[np.isfinite(cur)]
        if len(ref) < min_samples or len(cur) < min_samples:
            short.append(FeatureResult(name, kind, "ks" if kind == "continuous" else "chi2", float("nan"), 1.0,
                                       1.0, False, 0.0, "", {}, {}, len(ref), len(cur), "insufficient_data"))
            continue
        if kind == "continuous":
            d, p = _continuous(ref, cur)
            partial.append((name, kind, "ks", d, p, d, "ks_d", _summary_continuous(ref), _summary_continuous(cur),
                            len(ref), len(cur)))
        else:
            chi2, p, v = _categorical(ref, cur)
            partial.append((name, kind, "chi2", chi2, p, v, "cramers_v", _summary_categorical(ref),
                            _summary_categorical(cur), len(ref), len(cur)))
    adjusted = (stats.false_discovery_control([p[4] for p in partial], method="bh") if partial else [])
    done = [
        FeatureResult(name, kind, method, stat, p, float(q), bool(q < alpha), eff, eff_name, bs, cs, nb, nc, "ok")
        for (name, kind, method, stat, p, eff, eff_name, bs, cs, nb, nc), q in zip(partial, adjusted, strict=True)
    ]
    return sorted(done + short, key=lambda r: r.feature)

