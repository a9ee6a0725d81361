"""Canary statistics: always-valid tests that keep their false-fail rate however often the judge looks.

Sequential validity (documented in docs/canary.md):

* Bad-event ratios (errors, aborts, truncations, refusals, latency above an SLO edge) use an exact
  *conditional* test. Under "canary no worse than baseline", each bad event lands in the canary arm with
  probability p0 = canary share of requests, whatever the split and whatever the baseline rate (zero
  baseline errors included). The evidence is a mixture likelihood ratio over a grid of worse ratios;
  it is a non-negative supermartingale under the null, so by Ville's inequality P(it ever reaches 1/α)
  ≤ α: the judge may look after every scrape without inflating false fails.
* Pass-rate non-inferiority and quantile ratios use normal-mixture confidence sequences
  (Johari et al., "always valid p-values"; Howard et al. 2021) on the difference of proportions, and an
  order-statistic interval per arm at the same per-metric α.
* Minimum sample sizes are the fixed-sample ones (one-sided α, power) for the configured effect; below
  them a metric that has not failed is Inconclusive, never Pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from observer.analyse import histogram
from observer.collect.model import Histogram
from observer.conventions import vllm

RATIO_GRID: tuple[float, ...] = (1.25, 1.5, 2.0, 3.0, 5.0, 10.0)
"""Worse-by ratios the mixture puts equal weight on (plus the configured effect ratio)."""


@dataclass(frozen=True)
class RatioTest:
    """Canary vs baseline bad-event rate by the exact conditional sequential test."""

    bad_canary: int
    n_canary: int
    bad_baseline: int
    n_baseline: int
    rate_canary: float
    rate_baseline: float
    ratio: float | None
    """Canary rate ÷ baseline rate; None when the baseline rate is zero."""
    p_value: float
    """Always-valid p-value (1 / mixture likelihood ratio, capped at 1)."""
    p_fixed: float
    """One-sided exact conditional binomial p-value of this look alone (shown, not used to decide)."""
    reject: bool


@dataclass(frozen=True)
class Interval:
    """A point estimate with a two-sided interval at a stated coverage."""

    estimate: float
    low: float
    high: float
    level: float


def _logsumexp(x: np.ndarray) -> float:
    m = float(np.max(x))
    return m + math.log(float(np.sum(np.exp(x - m))))


def ratio_test(bad_canary: int, n_canary: int, bad_baseline: int, n_baseline: int, *, alpha: float,
               effect_ratio: float | None = None) -> RatioTest:
    """Test "canary bad-event rate > baseline's" on counts, valid under repeated looks and unequal splits."""
    from scipy import special  # lazy: scipy.stats costs ~60 MB of RSS in the sidecar
    for label, v in (("bad_canary", bad_canary), ("n_canary", n_canary), ("bad_baseline", bad_baseline),
                     ("n_baseline", n_baseline)):
        if v < 0:
            raise ValueError(f"{label} must be >= 0, got {v}")
    if bad_canary > n_canary or bad_baseline > n_baseline:
        raise ValueError("bad events cannot exceed requests")
    rate_c = bad_canary / n_canary if n_canary else 0.0
    rate_b = bad_baseline / n_baseline if n_baseline else 0.0
    ratio = rate_c / rate_b if rate_b > 0 else None
    events = bad_canary + bad_baseline
    if n_canary == 0 or n_baseline == 0 or events == 0:
        return RatioTest(bad_canary, n_canary, bad_baseline, n_baseline, rate_c, rate_b, ratio, 1.0, 1.0, False)
    p0 = n_canary / (n_canary + n_baseline)
    grid = sorted({*RATIO_GRID, *(() if effect_ratio is None else (effect_ratio,))})
    r = np.asarray(grid, dtype=float)
    p1 = p0 * r / (p0 * r + 1.0 - p0)
    log_lr = bad_canary * np.log(p1 / p0) + bad_baseline * np.log((1.0 - p1) / (1.0 - p0))
    log_lambda = _logsumexp(log_lr) - math.log(len(grid))
    p_av = 1.0 if log_lambda <= 0 else math.exp(-log_lambda)
    p_fixed = 1.0 if bad_canary == 0 else float(special.bdtrc(bad_canary - 1, events, p0))
    return RatioTest(bad_canary, n_canary, bad_baseline, n_baseline, rate_c, rate_b, ratio,
                     min(1.0, p_av), min(1.0, p_fixed), log_lambda >= math.log(1.0 / alpha))


def ratio_sample_size(*, base_rate: float, effect_ratio: float, alpha: float, power: float,
                      allocation: float = 1.0) -> int:
    """Canary requests for a one-sided two-proportion test to see `base_rate` × `effect_ratio` with `power`;
    `allocation` is baseline requests per canary request (19 at a 5% canary weight)."""
    p1 = base_rate
    p2 = min(base_rate * effect_ratio, 0.999)
    k = max(allocation, 1e-6)
    pbar = (p2 + k * p1) / (1.0 + k)
    za, zb = _z(1.0 - alpha), _z(power)
    num = za * math.sqrt(pbar * (1 - pbar) * (1 + 1 / k)) + zb * math.sqrt(p2 * (1 - p2) + p1 * (1 - p1) / k)
    return math.ceil(num * num / (p2 - p1) ** 2)


def noninferiority_sample_size(*, pass_rate: float, margin: float, alpha: float, power: float,
                               allocation: float = 1.0) -> int:
    """Canary items to show pass rate ≥ baseline − `margin` with `power` when the two are truly equal."""
    k = max(allocation, 1e-6)
    za, zb = _z(1.0 - alpha), _z(power)
    var = pass_rate * (1 - pass_rate) * (1 + 1 / k)
    return math.ceil((za + zb) ** 2 * var / margin**2)


def _z(p: float) -> float:
    from scipy import special  # lazy: scipy.stats costs ~60 MB of RSS in the sidecar
    return float(special.ndtri(p))


def _rank(n: float, q: float, p: float) -> float:
    """The p-quantile of Binomial(n, q): exact when small, normal approximation when n·q·(1−q) ≥ 25."""
    from scipy import stats as sps
    var = n * q * (1.0 - q)
    if var < 25:
        return float(sps.binom.ppf(p, n, q))
    return float(math.floor(n * q + _z(p) * math.sqrt(var)))


def _mixture_halfwidth(var: float, *, alpha: float, tau: float) -> float:
    """Half-width of the normal-mixture confidence sequence for an estimate with variance `var`."""
    t2 = tau * tau
    return math.sqrt(var * (var + t2) / t2 * (2.0 * math.log(1.0 / alpha) + math.log((var + t2) / var)))


def difference_sequence(pass_canary: int, n_canary: int, pass_baseline: int, n_baseline: int, *,
                        alpha: float, tau: float) -> Interval:
    """Always-valid interval for (canary pass rate − baseline pass rate), coverage 1 − `alpha` at every look.

    Rates are smoothed (x+1)/(n+2) for the variance so zero or full pass counts keep a positive width."""
    if n_canary <= 0 or n_baseline <= 0:
        raise ValueError("both arms need at least one scored item")
    pc, pb = pass_canary / n_canary, pass_baseline / n_baseline
    sc, sb = (pass_canary + 1) / (n_canary + 2), (pass_baseline + 1) / (n_baseline + 2)
    var = sc * (1 - sc) / n_canary + sb * (1 - sb) / n_baseline
    half = _mixture_halfwidth(var, alpha=alpha, tau=tau)
    d = pc - pb
    return Interval(d, max(-1.0, d - half), min(1.0, d + half), 1.0 - alpha)


def quantile_interval(h: Histogram, q: float, *, alpha: float) -> Interval | None:
    """Distribution-free interval for the q-quantile from order-statistic ranks, read off the histogram."""
    n = h.count
    if n <= 0:
        return None
    lo_rank = max(_rank(n, q, alpha / 2.0), 0.0)
    hi_rank = min(_rank(n, q, 1.0 - alpha / 2.0) + 1.0, n)
    est = histogram.quantile(q, h)
    lo = histogram.quantile(max(lo_rank / n, 1e-9), h)
    hi = histogram.quantile(min(hi_rank / n, 1.0), h)
    if math.isnan(est) or math.isnan(lo) or math.isnan(hi):
        return None
    return Interval(est, lo, hi, 1.0 - alpha)


def quantile_ratio(canary: Histogram, baseline: Histogram, q: float, *, alpha: float) -> Interval | None:
    """Canary ÷ baseline q-quantile with a conservative interval (each arm at α/2, Bonferroni)."""
    c = quantile_interval(canary, q, alpha=alpha / 2.0)
    b = quantile_interval(baseline, q, alpha=alpha / 2.0)
    if c is None or b is None or b.estimate <= 0 or b.low <= 0 or b.high <= 0:
        return None
    return Interval(c.estimate / b.estimate, c.low / b.high, c.high / b.low, 1.0 - alpha)


def auto_edge(baseline: Histogram, q: float) -> str | None:
    """The `le` text of the smallest finite edge at or above the baseline's q-quantile (None if none)."""
    if baseline.count <= 0 or not baseline.bounds:
        return None
    labels = baseline.le_labels or tuple(vllm.format_le(b) for b in baseline.bounds)
    target = q * baseline.count
    for label, cum in zip(labels, baseline.cumulative, strict=False):
        if cum >= target:
            return label
    return None


def split_check(n_canary: float, n_baseline: float, *, expected: float, tolerance: float,
                min_requests: int) -> tuple[bool, float]:
    """(ok, observed canary share): not ok when the share is off by more than `tolerance` (relative) and
    a two-sided exact binomial test at 0.001 agrees, once `min_requests` have been seen."""
    from scipy import stats as sps
    total = n_canary + n_baseline
    observed = n_canary / total if total > 0 else 0.0
    if total < min_requests or expected <= 0 or expected >= 1:
        return True, observed
    if abs(observed - expected) <= tolerance * expected:
        return True, observed
    p = float(sps.binomtest(round(n_canary), round(total), expected).pvalue)
    return p >= 0.001, observed

