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

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from observer.analyse import histogram
from observer.analyse.canary.sequential import (
    PLANNED_SLICES,
    RESTART_EVERY_SLICES,
    SliceTest,
    slice_excess,
    t_sequence,
    worse_share,
)
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


def _log_mixture_lr(bad_canary: float, bad_baseline: float, p0: float, grid: Sequence[float]) -> float:
    """log of the mean over worse-by ratios r of the likelihood ratio "a bad event is in the canary with
    probability p0·r/(p0·r + 1 − p0)" against p0."""
    r = np.asarray(grid, dtype=float)
    p1 = worse_share(p0, r)
    log_lr = bad_canary * np.log(p1 / p0) + bad_baseline * np.log((1.0 - p1) / (1.0 - p0))
    return _logsumexp(log_lr) - math.log(len(r))


def _always_valid(log_lambda: float, alpha: float) -> tuple[float, bool]:
    """(always-valid p-value, reject at α) of a mixture likelihood ratio given as its log."""
    return (1.0 if log_lambda <= 0 else min(1.0, math.exp(-log_lambda))), log_lambda >= math.log(1.0 / alpha)


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
    p_av, reject = _always_valid(_log_mixture_lr(bad_canary, bad_baseline, p0, grid), alpha)
    p_fixed = 1.0 if bad_canary == 0 else float(special.bdtrc(bad_canary - 1, events, p0))
    return RatioTest(bad_canary, n_canary, bad_baseline, n_baseline, rate_c, rate_b, ratio,
                     p_av, min(1.0, p_fixed), reject)


@dataclass(frozen=True)
class PairedTest:
    """Canary vs baseline on the same prompts: a sequential sign test on the decided (discordant) pairs."""

    losses: int
    """Decided pairs the canary lost (baseline answer better, or only the canary failed a rule check)."""
    wins: int
    p_value: float
    """Always-valid p-value of "the canary loses more than half of the decided pairs"."""
    reject: bool

    @property
    def decided(self) -> int:
        return self.losses + self.wins

    @property
    def loss_share(self) -> float | None:
        return self.losses / self.decided if self.decided else None


def paired_test(losses: int, wins: int, *, alpha: float, effect_share: float | None = None) -> PairedTest:
    """Sign test on decided pairs, valid at every look: the conditional ratio test with p0 = ½.

    Under "the canary is no worse", a decided pair is a canary loss with probability ≤ ½. Where both answers
    come from the same model (an A/A pair) and the judge is asked in both orders, the two answers of a pair
    are exchangeable, so each decided pair is a fair coin *whatever the dependence between prompts*
    (bursts of similar prompts, one user's session): the test needs no independence between pairs."""
    if losses < 0 or wins < 0:
        raise ValueError(f"losses and wins must be >= 0, got {losses} and {wins}")
    if losses + wins == 0:
        return PairedTest(losses, wins, 1.0, False)
    grid = sorted({*RATIO_GRID, *(() if effect_share is None else (effect_share / (1.0 - effect_share),))})
    return PairedTest(losses, wins, *_always_valid(_log_mixture_lr(losses, wins, 0.5, grid), alpha))


@functools.lru_cache(maxsize=256)
def paired_sample_size(*, effect_share: float, alpha: float, limit: int = 100_000) -> int:
    """Decided pairs at which a canary losing `effect_share` of them is rejected (at the expected split).

    Below it a paired metric that has not failed is Inconclusive: no test on fewer pairs could have failed a
    canary that bad, so a Pass would be a pass by construction."""
    if not 0.5 < effect_share < 1.0:
        raise ValueError(f"effect_share must be in (0.5, 1), got {effect_share}")
    n = 1
    while n < limit:
        losses = round(effect_share * n)
        if paired_test(losses, n - losses, alpha=alpha, effect_share=effect_share).reject:
            return n
        n = n + 1 if n < 64 else math.ceil(n * 1.05)
    return limit


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



POOLED_MIN_SLICES = 10
"""Slices before the design effect is trusted to deflate pooled counts (fewer: it is too noisy)."""


def _fitted_deff(x: np.ndarray, n: np.ndarray, y: np.ndarray, m: np.ndarray) -> float:
    """Design effect around the fitted rate ratio θ̂ (≥ 1): residual x − p(θ̂)·k over slices ÷ binomial.

    With one arm at zero, θ̂ is at its boundary (0 or ∞) and says nothing about clustering; taking θ = 1
    there would count the effect itself as overdispersion (a canary refusing 15 % of every slice against
    none would weigh as one event per slice). Then the arm with the events is measured around its own rate:
    a consistent excess spread over the slices has a design effect near 1, a burst in one slice a large one."""
    bx, by = float(x.sum()), float(y.sum())
    if (bx > 0) != (by > 0):
        return _single_arm_deff(x, n) if bx > 0 else _single_arm_deff(y, m)
    theta = (bx / float(n.sum())) / (by / float(m.sum())) if bx > 0 and by > 0 else 1.0
    p0 = n / (n + m)
    p = p0 * theta / (p0 * theta + 1.0 - p0)
    k = x + y
    binom = float(np.sum(p * (1.0 - p) * k))
    j = len(x)
    if binom <= 0 or j < 2:
        return 1.0
    return max(1.0, float(np.sum((x - p * k) ** 2)) * j / (j - 1) / binom)


def _single_arm_deff(x: np.ndarray, n: np.ndarray) -> float:
    """Kish's design effect (≥ 1) of one arm's bad events over slices around its pooled rate."""
    total = float(n.sum())
    j = int(np.count_nonzero(n))
    if total <= 0 or j < 2:
        return 1.0
    rate = float(x.sum()) / total
    binom = rate * (1.0 - rate) * total
    if binom <= 0:
        return 1.0
    return max(1.0, float(np.sum((x - rate * n) ** 2)) * j / (j - 1) / binom)


def _deflated_ratio(bad_c: float, n_c: float, bad_b: float, n_b: float, *, deff: float, alpha: float
                    ) -> tuple[float, bool]:
    """(p, reject) of the conditional mixture test on counts ÷ `deff` (events per independent cluster)."""
    events = bad_c + bad_b
    if n_c <= 0 or n_b <= 0 or events <= 0:
        return 1.0, False
    return _always_valid(_log_mixture_lr(bad_c / deff, bad_b / deff, n_c / (n_c + n_b), RATIO_GRID), alpha)


NONINFERIOR_FRACTIONS: tuple[float, ...] = (0.25, 0.5, 0.65, 0.8)
"""No-worse-than ratios the pass test's mixture weighs, as fractions of the effect ratio (at effect 2: 0.5,
1.0, 1.3 and 1.6). Each gets equal weight: a healthy canary (ratio 1) pays log 4 in evidence."""


@dataclass(frozen=True)
class BoundTest:
    """"The canary is worse by less than `effect_ratio`": the other side of the fail test, for a pass."""

    p_value: float
    """Always-valid p-value of "canary ÷ baseline ≥ effect_ratio" (1 / mixture likelihood ratio, ≤ 1)."""
    accept: bool
    """The canary is shown to be less than effect_ratio× worse at the test's level: it may pass."""


def noninferior(bad_canary: float, n_canary: float, bad_baseline: float, n_baseline: float, *,
                effect_ratio: float, alpha: float, design_effect: float = 1.0, base_rate: float = 0.0
                ) -> BoundTest:
    """Sequential test of "the canary's bad-event rate is at least `effect_ratio` × the baseline's" on counts
    (÷ `design_effect`: events per independent cluster), rejected for a canary the data show to be better
    than that. Conditional on the bad events of both arms, a bad event is the canary's with probability
    p(r) = p0·r/(p0·r + 1 − p0) for a canary r× worse; the likelihood ratio of a mixture over ratios below
    `effect_ratio` against p(effect_ratio) is a non-negative supermartingale for any canary at least that
    bad, so by Ville's inequality a canary that bad is accepted at some look with probability ≤ α.

    Where the baseline's rate is below `base_rate` (few or no bad events: the conditional test has nothing
    to condition on), rates below `base_rate` are taken as equally fine and the canary alone is tested
    against effect_ratio × base_rate, by the same mixture on its Bernoulli counts."""
    if n_canary <= 0 or n_baseline <= 0 or design_effect <= 0:
        return BoundTest(1.0, False)
    xc, xb = max(bad_canary, 0.0) / design_effect, max(bad_baseline, 0.0) / design_effect
    if bad_baseline / n_baseline < base_rate:
        q0 = min(effect_ratio * base_rate, 0.999)
        q1 = np.asarray([q0 * f for f in NONINFERIOR_FRACTIONS])
        nc = n_canary / design_effect
        log_lr = xc * np.log(q1 / q0) + (nc - xc) * np.log((1.0 - q1) / (1.0 - q0))
        return BoundTest(*_always_valid(_logsumexp(log_lr) - math.log(len(q1)), alpha))
    if xc + xb <= 0:
        return BoundTest(1.0, False)
    p0 = n_canary / (n_canary + n_baseline)
    pr = float(worse_share(p0, effect_ratio))
    # p(effect_ratio·f) is p(effect_ratio) with its odds scaled by f: the fail test's mixture, centred on pr.
    return BoundTest(*_always_valid(_log_mixture_lr(xc, xb, pr, NONINFERIOR_FRACTIONS), alpha))


def slice_test(bad_canary: np.ndarray, n_canary: np.ndarray, bad_baseline: np.ndarray, n_baseline: np.ndarray,
               *, alpha: float, restart_every: int = RESTART_EVERY_SLICES, planned: int = PLANNED_SLICES,
               pooled: bool = False) -> SliceTest:
    """Test "canary bad-event rate > baseline's" on per-slice counts, at any number of looks.

    `pooled` (rare events such as errors, a few per slice, where a t-test on slices is weak): instead of
    the t-test, the exact conditional test on the window's counts divided by the measured design effect,
    at α, from POOLED_MIN_SLICES slices on (no fresh starts: `start_slice` is 0).

    Assumption (docs/canary.md): requests may be dependent *within* a slice (one minute) in any way; the
    slices' excesses X_j are independent of each other, with mean ≤ 0 for a canary no worse than the
    baseline and not skewed towards the canary. The t-test's e-value is exact for Gaussian X_j; clusters
    of bad events on the canary make X_j right-skewed, which makes it conservative. The step-start test
    gets α/2; fresh tests from every `restart_every`-th slice share the other α/2, so a change mid-step is
    tested on the data since it, not diluted by the healthy minutes before (t-test only)."""
    x = np.asarray(bad_canary, dtype=float)
    n = np.asarray(n_canary, dtype=float)
    y = np.asarray(bad_baseline, dtype=float)
    m = np.asarray(n_baseline, dtype=float)
    if not (len(x) == len(n) == len(y) == len(m)):
        raise ValueError("slice arrays must have the same length")
    if np.any((x < 0) | (y < 0) | (x > n) | (y > m)):
        raise ValueError("bad events must be within 0..requests in every slice")
    xs, h = slice_excess(x, n, y, m)
    used = (n > 0) & (m > 0)
    x, n, y, m = x[used], n[used], y[used], m[used]
    k = x + y
    j = len(xs)
    total_s = float(xs.sum())
    # The spread around the fitted excess θ̂·h_j (h_j ∝ the slice's information): a larger slice carries a
    # larger excess on a worse canary, which is not dependence. Equal slices: the spread around the mean.
    hn = h / h.mean() if j else h
    theta = total_s / float(hn.sum()) if j else 0.0
    centred = float(np.sum((xs - theta * hn) ** 2 / hn)) if j else 0.0
    # One design effect for everything that deflates counts (the pooled test, the pass bound) and for what
    # is shown: the spread of the canary's bad events around the fitted rate ratio ÷ binomial.
    deff = _fitted_deff(x, n, y, m) if j >= 2 and float(k.sum()) > 0 else None
    if pooled:
        best_p, best_start, reject = 1.0, 0, False
        # As the t-test's earlier looks: the design effect is re-measured as slices come in, and a fail the
        # test made at the end of an earlier slice, on the counts and the design effect it had, stands.
        for i in range(POOLED_MIN_SLICES, j + 1) if deff is not None else ():
            if float(k[:i].sum()) <= 0:
                continue
            p, rej = _deflated_ratio(float(x[:i].sum()), float(n[:i].sum()), float(y[:i].sum()),
                                     float(m[:i].sum()), deff=_fitted_deff(x[:i], n[:i], y[:i], m[:i]),
                                     alpha=alpha)
            best_p, reject = min(best_p, p), reject or rej
    else:
        best_p, best_start, reject = t_sequence(xs, alpha=alpha, restart_every=restart_every, planned=planned,
                                                sizes=h) if j else (1.0, 0, False)
    return SliceTest(slices=j, excess=total_s, variance=max(centred, 0.0), design_effect=deff,
                     p_value=best_p, start_slice=best_start, reject=reject)
