"""The two anchors bench.canary compares the observer's judge with, fed the same simulated steps.

  fixed_threshold  the reference architecture's template: every 2 min the canary's P95 TTFT (or error rate)
                   over the last 2 min must be under a threshold; failureLimit 2; an empty window fails.
  kayenta_style    Kayenta's judge on 1-minute buckets: a one-sided Mann-Whitney test of canary vs baseline
                   bucket values per metric (P95 TTFT, error rate), judged every minute.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as sps

from observer.analyse import histogram
from tests.support.canary_streams import TTFT_EDGES, Step, to_histogram

FIXED_INTERVAL = 120
FIXED_FAILURE_LIMIT = 2
KAYENTA_BUCKET = 60
KAYENTA_ALPHA = 0.01


def fixed_windows(step: Step, kind: str) -> np.ndarray:
    """The canary's value in each 2-minute window (inf when empty: NaN fails a success-only condition)."""
    out = []
    for t in range(FIXED_INTERVAL, step.seconds + 1, FIXED_INTERVAL):
        lo = t - FIXED_INTERVAL
        n = int(step.canary.requests[lo:t].sum())
        if n == 0:
            out.append(math.inf)
        elif kind == "ttft":
            v = histogram.quantile(0.95, to_histogram(step.canary.ttft[lo:t].sum(axis=0), TTFT_EDGES))
            out.append(math.inf if math.isnan(v) else v)
        else:
            out.append(float(step.canary.reasons[lo:t, 3].sum()) / n)
    return np.asarray(out)


def fixed_first_fail(windows: np.ndarray, threshold: float) -> int | None:
    failures = 0
    for i, value in enumerate(windows):
        if not value < threshold:
            failures += 1
            if failures > FIXED_FAILURE_LIMIT:
                return (i + 1) * FIXED_INTERVAL
    return None


def fixed_critical(windows: np.ndarray) -> float:
    """The threshold at or below which this step fails: its (failureLimit + 1)-th largest window value."""
    if len(windows) <= FIXED_FAILURE_LIMIT:
        return -math.inf
    return float(np.sort(windows)[::-1][FIXED_FAILURE_LIMIT])


def _bucket_values(step: Step, arm: str, kind: str, minutes: int) -> list[float]:
    s = getattr(step, arm)
    out: list[float] = []
    for m in range(minutes):
        lo, hi = m * KAYENTA_BUCKET, (m + 1) * KAYENTA_BUCKET
        n = int(s.requests[lo:hi].sum())
        if n == 0:
            continue
        if kind == "ttft":
            out.append(histogram.quantile(0.95, to_histogram(s.ttft[lo:hi].sum(axis=0), TTFT_EDGES)))
        else:
            out.append(float(s.reasons[lo:hi, 3].sum()) / n)
    return out


def kayenta_pvalues(step: Step, kind: str) -> list[tuple[int, float]]:
    """(second, one-sided Mann-Whitney p) at each minute's look."""
    out = []
    c_all = _bucket_values(step, "canary", kind, step.seconds // KAYENTA_BUCKET)
    b_all = _bucket_values(step, "baseline", kind, step.seconds // KAYENTA_BUCKET)
    for t in range(KAYENTA_BUCKET * 3, step.seconds + 1, KAYENTA_BUCKET):
        minutes = t // KAYENTA_BUCKET
        c, b = c_all[:minutes], b_all[:minutes]
        if len(c) < 3 or len(b) < 3 or len(set(c) | set(b)) < 2:
            continue
        out.append((t, float(sps.mannwhitneyu(c, b, alternative="greater").pvalue)))
    return out


def kayenta_first_fail(ps: list[tuple[int, float]], alpha: float) -> int | None:
    return next((t for t, p in ps if p < alpha), None)
