"""Anytime-valid sequential tests on one-minute slices: the canary's excess over its share, tested slice by
slice so that requests that go bad together (a stalled pod, a queue, a restart) count as one piece of
evidence, with fresh starts so a change mid-step is not diluted by the healthy data before it.
`stats.slice_test` and the latency shift test are built on these (docs/canary.md).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RESTART_EVERY_SLICES = 5
"""Slices between the fresh starts of the change test (5 one-minute slices: a change mid-step is tested
on the data since the last start at or before it, not diluted by the healthy data before)."""


@dataclass(frozen=True)
class SliceTest:
    """Canary vs baseline bad-event rate on time slices, robust to dependence within a slice.

    Per slice j the canary's excess bad events X_j = x_j − p0_j·(x_j + y_j), p0_j its share of the slice's
    requests. The X_j are tested for a positive mean with an anytime-valid t-test: their spread is
    estimated from the slices themselves, so requests that go bad together (a stalled pod, a queue behind
    a long prompt, a restart) enter as one large slice, not as many independent pieces of evidence."""

    slices: int
    excess: float
    """S: canary bad events above its share, summed over slices."""
    variance: float
    """Σ (X_j − θ̂·h_j)²/h_j (h_j the slice's size share, mean 1; equal slices: Σ (X_j − X̄)²): the slices'
    own (cluster-robust) spread around the fitted excess."""
    design_effect: float | None
    """Kish's design effect (≥ 1): the slices' spread of canary bad events around the fitted rate ratio ÷ the
    binomial variance of independent requests. None with fewer than 2 slices or no bad events."""
    p_value: float
    """Always-valid p-value over all starts (1 / e-value, α-share adjusted, capped at 1)."""
    start_slice: int
    """The start (slice index) whose test gave `p_value`: 0 is the step start, later ones a change."""
    reject: bool


G_FACTORS: tuple[float, ...] = (1.0, 10.0)
"""The e-value is the average over these multiples of slice_g (an average of e-values is one): the first
is tight for an effect just detectable in a step, the second lets a large one fail in 5–6 slices."""

PLANNED_SLICES = 15
"""Slices at which the t-test's mixture is tuned to be tightest (Argo's default count of 15 one-minute
measurements: the end of one analysis step)."""


def slice_g(alpha: float, planned: int = PLANNED_SLICES) -> float:
    """Prior variance of the standardised effect δ = mean/sd of X_j: the δ that is just detectable at
    `planned` slices, δ² ≈ 2·log(1/α)/planned."""
    return 2.0 * math.log(1.0 / alpha) / planned


MAX_RESTARTS = 8
"""Fresh starts after the step start (every RESTART_EVERY_SLICES: the first 40 minutes of a step)."""


def log_t_evalues(s: np.ndarray, v: np.ndarray, j: np.ndarray, g: float, a: np.ndarray | None = None
                  ) -> np.ndarray:
    """log e-values of the anytime-valid t-test of "mean ≤ 0" on j values with sum s and sum of squares v
    (elementwise; 0 where s ≤ 0 or v ≤ 0, and never below 0).

    Each is the Bayes factor with a N(0, g) prior on δ = μ/σ and the right-Haar prior 1/σ on σ (Rouder et
    al. 2009; anytime-valid by group invariance, Pérez-Ortiz, Lardy, de Heide & Grünwald 2024):
    (1 + a·g)^(−1/2) · (v / (v − s²·g/(1 + a·g)))^(j/2). Two-sided, so it is conservative one-sided.

    With `a` (default j) the values follow z_i = μ·a_i + σ·ε_i (a regression through the origin): s is
    Σ a_i·z_i, v is Σ z_i² and `a` is Σ a_i², the same Bayes factor with the design's information in
    place of the count (see t_sequence's `sizes`)."""
    a = j if a is None else a
    ok = (s > 0) & (v > 0)
    v_safe = np.where(ok, v, 1.0)
    shrink = np.where(ok, s * s * g / (1.0 + a * g), 0.0)
    rest = np.maximum(v_safe - shrink, v_safe * 1e-300)
    out = -0.5 * np.log1p(a * g) + 0.5 * j * (np.log(v_safe) - np.log(rest))
    return np.where(ok, np.maximum(out, 0.0), 0.0)


def start_alpha(k: int, alpha: float) -> float:
    """α share of the k-th start: α/2 for the step start, α/(2·MAX_RESTARTS) for each restart (sums to α);
    0 after the last restart."""
    if k == 0:
        return alpha / 2.0
    return alpha / (2.0 * MAX_RESTARTS) if k <= MAX_RESTARTS else 0.0


def t_sequence(xs: np.ndarray, *, alpha: float, restart_every: int = RESTART_EVERY_SLICES,
               planned: int = PLANNED_SLICES, sizes: np.ndarray | None = None) -> tuple[float, int, bool]:
    """(p-value, start slice, reject) of the anytime-valid t-test of "mean ≤ 0" on slice values `xs`,
    from the step start (α/2) and from every `restart_every`-th slice (the other α/2, see start_alpha).

    `sizes`: each slice's weight h_j, with X_j's mean h_j·θ and its variance under the null σ²·h_j (an
    excess of bad events over a slice's expected count: both grow with its requests). Slices then differ
    in size without that difference reading as spread: the test is the regression of X_j/√h_j on √h_j
    (log_t_evalues' `a`). Without sizes every slice weighs the same (the mean of X_j is tested). Unequal
    slices are common: a step's first slice, a weight change, a scrape that lands between two slices; a
    mean test on them reads a real excess, larger in the larger slices, as noise and fails to fail."""
    xs = np.asarray(xs, dtype=float)
    if sizes is None:
        z, a2 = xs, np.ones_like(xs)
    else:
        h = np.asarray(sizes, dtype=float)
        if h.shape != xs.shape or np.any(h <= 0):
            raise ValueError("slice sizes must be positive, one per slice")
        h = h / h.mean()  # a² averages 1: g keeps its meaning, the standardised effect of a typical slice
        z, a2 = xs / np.sqrt(h), h
    gs = tuple(f * slice_g(alpha, planned) for f in G_FACTORS)
    cs = np.concatenate(([0.0], np.cumsum(np.sqrt(a2) * z)))
    cv = np.concatenate(([0.0], np.cumsum(z * z)))
    ca = np.concatenate(([0.0], np.cumsum(a2)))
    best_p, best_start, reject = 1.0, 0, False
    for i, start in enumerate(range(0, max(len(xs) - 1, 1), max(restart_every, 1))):
        if i > MAX_RESTARTS:
            break
        # Every slice end since `start` is a look a continuous monitor could have made: the window's
        # verdict is the running maximum (valid by Ville's inequality), so one more slice cannot undo a fail.
        s_all = cs[start + 2:] - cs[start]
        v_all = cv[start + 2:] - cv[start]
        a_all = ca[start + 2:] - ca[start]
        j_all = np.arange(2, len(xs) - start + 1, dtype=float)
        if s_all.size == 0:
            continue
        logs = np.stack([log_t_evalues(s_all, v_all, j_all, g, a_all) for g in gs])
        top = logs.max(axis=0)
        mixed = top + np.log(np.mean(np.exp(logs - top), axis=0))
        log_e = float(mixed.max())
        if log_e <= 0:
            continue
        a_k = start_alpha(i, alpha)
        p = min(1.0, math.exp(-log_e) * alpha / a_k)
        if p < best_p:
            best_p, best_start = p, start
        reject = reject or log_e >= math.log(1.0 / a_k)
    return best_p, best_start, reject


@dataclass(frozen=True)
class ShiftTest:
    """Is the canary's whole latency distribution shifted up? A per-slice rank (ridit) test on buckets."""

    slices: int
    shift: float
    """P(canary request slower than a baseline one of its slice) − ½, request-weighted mean."""
    p_value: float
    start_slice: int
    reject: bool


def shift_test(canary_bins: np.ndarray, baseline_bins: np.ndarray, *, alpha: float,
               restart_every: int = RESTART_EVERY_SLICES, planned: int = PLANNED_SLICES) -> ShiftTest:
    """Per slice j, X_j = Σ over the canary's requests of (ridit against the slice's baseline − ½), ridits
    from non-cumulative bucket counts (ties count ½: both arms share the buckets). X_j has mean 0 when
    the arms' latencies are alike and is positive when the canary is slower everywhere; tested with
    t_sequence under the same assumption as slice_test."""
    c = np.asarray(canary_bins, dtype=float)
    b = np.asarray(baseline_bins, dtype=float)
    if c.shape != b.shape or c.ndim != 2:
        raise ValueError("bucket arrays must both be (slices, buckets)")
    nc, nb = c.sum(axis=1), b.sum(axis=1)
    used = (nc > 0) & (nb > 0)
    c, b, nc, nb = c[used], b[used], nc[used], nb[used]
    below = np.cumsum(b, axis=1) - b
    ridit = (below + 0.5 * b) / nb[:, None]
    xs = np.sum(c * (ridit - 0.5), axis=1)
    # X_j's mean grows with nc (a shift θ per canary request), its null variance with nc·(nc + nb)/nb (the
    # canary's ridits, plus the baseline's estimate of the scale): X_j·h/nc has mean h·θ and variance ∝ h.
    h = nc * nb / (nc + nb)
    p, start, reject = t_sequence(xs * h / nc, alpha=alpha, restart_every=restart_every, planned=planned,
                                  sizes=h) if xs.size else (1.0, 0, False)
    shift = float(xs.sum() / nc.sum()) if nc.size else 0.0
    return ShiftTest(slices=int(used.sum()), shift=shift, p_value=p, start_slice=start, reject=reject)
