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


def worse_share(p0: np.ndarray | float, ratio: np.ndarray | float) -> np.ndarray | float:
    """The share of the bad events that lands in the canary when it takes `p0` of the requests and its bad-event
    rate is `ratio` × the baseline's: p0·r / (p0·r + 1 − p0). Under "no worse" (r = 1) it is p0."""
    return p0 * ratio / (p0 * ratio + 1.0 - p0)


MAX_BLOCK_SLICES = 6
"""Most slices merged into one unit when the slices' excesses are correlated from one to the next."""


def block_size(xs: np.ndarray, sizes: np.ndarray, *, split: int = 0) -> int:
    """Slices per dependence block: b ≈ (1 + ρ)/(1 − ρ), the variance inflation of a mean of AR(1) values with
    lag-1 correlation ρ, so that blocks of b consecutive slices are close to independent (a pod busy for
    minutes slows every slice of them). ρ is the lag-1 correlation of the residuals of all the window's slices
    around their fitted excess, fitted apart before and after `split` (a change at a fresh start is a shift of
    the mean, which fitted as one would read as correlation), bias-corrected and taken one standard error
    high: a block too short is what inflates the false fails, one too long only costs power. 1 below 8 slices."""
    x, h = np.asarray(xs, dtype=float), np.asarray(sizes, dtype=float)
    if x.size < MIN_SLICES_TO_BLOCK:
        return 1
    hn = h / h.mean()
    r = np.empty_like(x)
    for lo, hi in ((0, split), (split, x.size)):
        if hi > lo:
            theta = float(x[lo:hi].sum()) / float(hn[lo:hi].sum())
            r[lo:hi] = (x[lo:hi] - theta * hn[lo:hi]) / np.sqrt(hn[lo:hi])
    ss = float(np.sum(r * r))
    lag = r[1:] * r[:-1]
    if 0 < split < x.size:
        lag[split - 1] = 0.0  # the pair across the split is not a lag of one process
    rho = float(lag.sum()) / ss if ss > FLAT * float(np.sum(x * x / hn)) else 0.0
    return int(_blocks_of(np.array([rho]), np.array([float(x.size)]))[0])


MIN_SLICES_TO_BLOCK = 8
"""Slices before the lag-1 correlation is measured at all (fewer: blocks of one)."""


def _blocks_of(rho: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Block sizes from lag-1 correlations `rho` measured on `n` slices each."""
    # Kendall's bias of the lag-1 estimate, about −(1 + 3ρ)/K, and one standard error (1/√K) of margin.
    r = np.clip(rho + (1.0 + 3.0 * rho) / n + RHO_MARGIN / np.sqrt(n), 0.0, 0.9)
    out: np.ndarray = np.clip(np.ceil((1.0 + r) / (1.0 - r) - 0.25), 1, MAX_BLOCK_SLICES).astype(np.int64)
    return out


def look_block_sizes(xs: np.ndarray, sizes: np.ndarray, splits: np.ndarray) -> np.ndarray:
    """block_size at every look and split at once: element [s, k − 1] is block_size(xs[:k], sizes[:k],
    split=splits[s]), what the look at the end of slice k measured for the start at splits[s].

    From running sums: each part's residual sum of squares Σx²/h − (Σx)²/Σh and lag sum
    Σ (x_i − θh_i)(x_i+1 − θh_i+1)/√(h_i·h_i+1) expanded in θ (ρ does not depend on the scale of the sizes,
    so block_size's normalisation drops out)."""
    x, h = np.asarray(xs, dtype=float), np.asarray(sizes, dtype=float)
    sp = np.asarray(splits, dtype=np.int64)[:, None]
    size = x.size
    out = np.ones((sp.size, size), dtype=np.int64)
    if size < MIN_SLICES_TO_BLOCK or sp.size == 0:
        return out

    def run(v: np.ndarray) -> np.ndarray:
        return np.concatenate(([0.0], np.cumsum(v)))

    cx, ch, cq = run(x), run(h), run(x * x / h)
    g = np.sqrt(h[1:] * h[:-1])
    # Pair sums, one longer (a part with no pair may start at the last slice).
    cp, cm, cr = (np.append(run(v), 0.0) for v in (x[1:] * x[:-1] / g, (x[:-1] * h[1:] + h[:-1] * x[1:]) / g,
                                                      h[1:] * h[:-1] / g))
    k = np.arange(1, size + 1)[None, :]
    ss = np.zeros((sp.size, size))
    lag = np.zeros((sp.size, size))
    # The part before the split (all of a look that ends before it), then the part from the split on.
    for lo, hi in ((np.zeros_like(sp), np.minimum(sp, k)), (np.minimum(sp, k), k)):
        sx, sh, pairs = cx[hi] - cx[lo], ch[hi] - ch[lo], np.maximum(hi - lo - 1, 0)
        theta = np.divide(sx, sh, out=np.zeros(ss.shape), where=sh > 0)
        ss += cq[hi] - cq[lo] - theta * sx
        end = lo + pairs
        lag += (cp[end] - cp[lo]) - theta * (cm[end] - cm[lo]) + theta * theta * (cr[end] - cr[lo])
    # Residuals at rounding level (bad events exactly in proportion): no correlation to read.
    rho = np.divide(lag, ss, out=np.zeros(ss.shape), where=ss > FLAT * (cq[k] + 1e-300))
    long = k[0] >= MIN_SLICES_TO_BLOCK
    out[:, long] = _blocks_of(rho[:, long], k[0, long].astype(float)[None, :])
    return out


FLAT = 1e-9
"""Residual sum of squares, relative to Σx²/h, under which the slices read as exactly proportional."""


RHO_MARGIN = 1.0
"""Standard errors added to the estimated lag-1 correlation before the block size is taken from it."""


def blocked(xs: np.ndarray, sizes: np.ndarray, b: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, sizes) summed over consecutive blocks of `b` slices (the last may be shorter: its size says)."""
    x, h = np.asarray(xs, dtype=float), np.asarray(sizes, dtype=float)
    if b <= 1 or x.size == 0:
        return x, h
    edges = np.arange(0, x.size, b)
    return np.add.reduceat(x, edges), np.add.reduceat(h, edges)


def dependence_blocks(xs: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(block values, block sizes, slices per block) of a whole window (block_size, blocked). It narrows the
    excess of a t-test on correlated slices, it does not remove it (tests/unit/test_canary_planned.py);
    the share of α no test spends (planned.END_SHARE) is the margin for it."""
    b = block_size(xs, sizes)
    return (*blocked(xs, sizes, b), b)


def t_sequence(xs: np.ndarray, *, alpha: float, restart_every: int | None = RESTART_EVERY_SLICES,
               planned: int = PLANNED_SLICES, sizes: np.ndarray | None = None, earlier_looks: bool = True
               ) -> tuple[float, int, bool]:
    """(p-value, start slice, reject) of the anytime-valid t-test of "mean ≤ 0" on slice values `xs`,
    from the step start (α/2) and from every `restart_every`-th slice (the other α/2, see start_alpha);
    `restart_every` None: from the step start only, at the whole α (a pass bound speaks for the whole step).

    `sizes`: each slice's weight h_j, with X_j's mean h_j·θ and its variance under the null σ²·h_j (an
    excess of bad events over a slice's expected count: both grow with its requests). Slices then differ
    in size without that difference reading as spread: the test is the regression of X_j/√h_j on √h_j
    (log_t_evalues' `a`). Without sizes every slice weighs the same (the mean of X_j is tested). Unequal
    slices are common: a step's first slice, a weight change, a scrape that lands between two slices; a
    mean test on them reads a real excess, larger in the larger slices, as noise and fails to fail.

    `earlier_looks` (a fail side): the test is also made as it stood at the end of every earlier slice,
    each with the dependence blocks measured on the data it had, and a reject at any of them stands. The
    block size is re-estimated as slices come in (8 slices of blocks of one can become 3 blocks of three),
    so without this one more slice could undo a fail that a gate looking every slice has already acted on,
    and the verdict would depend on when it is read. A gate looking every slice has this error rate anyway
    (what bench/canary.py measures); a gate looking less often gets the same, not less."""
    xs = np.asarray(xs, dtype=float)
    h = np.ones_like(xs) if sizes is None else np.asarray(sizes, dtype=float)
    if h.shape != xs.shape or np.any(h <= 0):
        raise ValueError("slice sizes must be positive, one per slice")
    if not earlier_looks:
        return _t_look(xs, h, alpha=alpha, restart_every=restart_every, planned=planned)
    return _t_every_look(xs, h, alpha=alpha, restart_every=restart_every, planned=planned)


MAX_LOOKS = 120
"""Most earlier looks a t-test is made at (a window of more slices: every 2nd, 4th, … slice's look): the
work grows with looks × slices."""


def _t_every_look(xs: np.ndarray, h: np.ndarray, *, alpha: float, restart_every: int | None, planned: int
                  ) -> tuple[float, int, bool]:
    """_t_look at the end of every slice of the window (slice k's look: the first k slices, their sizes'
    mean, their blocks), the most significant look kept. Vectorised over (start, look) rows and block ends
    (the same as calling _t_look on each prefix, tested so)."""
    size = xs.size
    every = max(size, 1) if restart_every is None else max(restart_every, 1)
    starts = np.arange(0, max(size - 1, 1), every)[:MAX_RESTARTS + 1]
    # Rows: a start and a look that tests it (from the start's second slice on). A long window is looked at
    # every `stride` slices (a power of two, so the looks of a longer window hold those of a shorter one).
    stride = 1 << max(0, math.ceil(math.log2(size / MAX_LOOKS))) if size > MAX_LOOKS else 1
    ks = np.arange(1, size + 1)
    si, look = np.nonzero((ks[None, :] >= starts[:, None] + 2) & ((ks % stride == 0) | (ks == size))[None, :])
    if look.size == 0:
        return 1.0, 0, False
    look = look + 1
    start = starts[si]
    b = look_block_sizes(xs, h, starts)[si, look - 1]
    cut = look - start  # slices since the start
    done = cut // b  # complete blocks
    cx, ch = np.concatenate(([0.0], np.cumsum(xs))), np.concatenate(([0.0], np.cumsum(h)))
    q = np.arange(1, int(done.max()) + 1)[None, :]  # block ends, by block
    inside = q <= done[:, None]
    end = start[:, None] + np.where(inside, q * b[:, None], 0)
    first = np.where(inside, end - b[:, None], 0)
    bx, bh = cx[end] - cx[first], ch[end] - ch[first]
    vc = np.cumsum(np.divide(bx * bx, bh, out=np.zeros(bx.shape), where=inside), axis=1)
    vc = np.concatenate((np.zeros((vc.shape[0], 1)), vc), axis=1)  # v after 0, 1, 2, … complete blocks
    # Every complete block end up to the look, and the look itself (the end of a shorter last block).
    last = start + done * b
    tail_x, tail_h = cx[look] - cx[last], ch[look] - ch[last]
    tail_v = vc[np.arange(done.size), done] + np.divide(tail_x * tail_x, tail_h, out=np.zeros(done.size),
                                                        where=tail_h > 0)
    s_at = np.column_stack([cx[end] - cx[start][:, None], cx[look] - cx[start]])
    a_at = np.column_stack([ch[end] - ch[start][:, None], ch[look] - ch[start]])
    v_at = np.column_stack([vc[:, 1:], tail_v])
    j_at = np.column_stack([np.broadcast_to(q, inside.shape), done + (cut % b > 0)]).astype(float)
    seen = np.column_stack([inside, cut % b > 0]) & (j_at >= 2)
    norm = (ch[look] / look)[:, None]  # each look's sizes over their own mean
    logs = np.stack([log_t_evalues(s_at, v_at * norm, j_at, f * slice_g(alpha, planned), a_at / norm)
                     for f in G_FACTORS])
    top = logs.max(axis=0)
    log_e = np.where(seen, top + np.log(np.mean(np.exp(logs - top), axis=0)), 0.0).max(axis=1)
    a_k = np.full(si.size, alpha) if restart_every is None else np.array([start_alpha(int(n), alpha) for n in si])
    p = np.minimum(1.0, np.exp(-log_e) * alpha / a_k)
    best = int(np.argmin(p))
    return float(p[best]), int(start[best]) if p[best] < 1.0 else 0, bool(np.any(log_e >= np.log(1.0 / a_k)))


def _t_look(xs: np.ndarray, h: np.ndarray, *, alpha: float, restart_every: int | None, planned: int
            ) -> tuple[float, int, bool]:
    """t_sequence at one look: the data of the window as it stands, blocks measured on all of it."""
    if xs.size:
        h = h / h.mean()  # a² averages 1: g keeps its meaning, the standardised effect of a typical slice
    gs = tuple(f * slice_g(alpha, planned) for f in G_FACTORS)
    best_p, best_start, reject = 1.0, 0, False
    every = max(len(xs), 1) if restart_every is None else max(restart_every, 1)
    for i, start in enumerate(range(0, max(len(xs) - 1, 1), every)):
        if i > MAX_RESTARTS:
            break
        # The data since `start` in dependence blocks, their size measured on the whole window (a late start
        # has too few slices of its own to measure it), fitted apart on either side of `start`.
        bx, bh = blocked(xs[start:], h[start:], block_size(xs, h, split=start))
        z, a2 = bx / np.sqrt(bh), bh
        # Every block end since `start` is a look a continuous monitor could have made with these blocks: the
        # running maximum is valid by Ville's inequality.
        s_all = np.cumsum(np.sqrt(a2) * z)[1:]
        v_all = np.cumsum(z * z)[1:]
        a_all = np.cumsum(a2)[1:]
        j_all = np.arange(2, z.size + 1, dtype=float)
        if s_all.size == 0:
            continue
        logs = np.stack([log_t_evalues(s_all, v_all, j_all, g, a_all) for g in gs])
        top = logs.max(axis=0)
        mixed = top + np.log(np.mean(np.exp(logs - top), axis=0))
        log_e = float(mixed.max())
        if log_e <= 0:
            continue
        a_k = alpha if restart_every is None else start_alpha(i, alpha)
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
    below_p_value: float = 1.0
    """The pass side (shift_test's `margin`): always-valid p-value of "the shift is at least the margin"."""
    below: bool = False
    """That hypothesis rejected: the shift is shown below the margin."""


def ridits(reference: np.ndarray) -> np.ndarray:
    """Each bucket's ridit against the non-cumulative `reference` counts along the last axis (the share of the
    reference below the bucket, plus half the bucket's own: ties count ½); ½ where the reference is empty."""
    ref = np.asarray(reference, dtype=float)
    total = ref.sum(axis=-1, keepdims=True)
    out: np.ndarray = np.divide(np.cumsum(ref, axis=-1) - 0.5 * ref, total, out=np.full(ref.shape, 0.5),
                                where=total > 0)
    return out


def shift_values(canary_bins: np.ndarray, baseline_bins: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, sizes, canary requests) of the slices with both arms: per slice j, X_j = Σ over the canary's
    requests of (ridit against the slice's baseline − ½), ridits from non-cumulative bucket counts (ties count
    ½: both arms share the buckets), as the t-tests read it (X_j·h_j/n_j with sizes h_j)."""
    c = np.asarray(canary_bins, dtype=float)
    b = np.asarray(baseline_bins, dtype=float)
    if c.shape != b.shape or c.ndim != 2:
        raise ValueError("bucket arrays must both be (slices, buckets)")
    nc, nb = c.sum(axis=1), b.sum(axis=1)
    used = (nc > 0) & (nb > 0)
    c, b, nc, nb = c[used], b[used], nc[used], nb[used]
    xs = np.sum(c * (ridits(b) - 0.5), axis=1)
    # X_j's mean grows with nc (a shift θ per canary request), its null variance with nc·(nc + nb)/nb (the
    # canary's ridits, plus the baseline's estimate of the scale): X_j·h/nc has mean h·θ and variance ∝ h.
    h = nc * nb / (nc + nb)
    return xs * h / nc, h, nc


def shift_test(canary_bins: np.ndarray, baseline_bins: np.ndarray, *, alpha: float,
               restart_every: int = RESTART_EVERY_SLICES, planned: int = PLANNED_SLICES,
               margin: float | None = None, pass_alpha: float = 0.0) -> ShiftTest:
    """Is the canary slower everywhere? shift_values' X_j have mean 0 when the arms' latencies are alike and
    are positive when the canary is slower; tested with t_sequence under the same assumption as slice_test.

    With `margin`, also the pass side at `pass_alpha`: "the shift is at least `margin`" rejected, anytime-valid,
    by t_sequence on margin·h_j − X_j (mean h_j·(margin − θ)), from the step start only. A canary slower
    everywhere by that much is shown below it in at most `pass_alpha` of its steps, whatever its share above
    the SLO edge."""
    z, h, nc = shift_values(canary_bins, baseline_bins)
    p, start, reject = t_sequence(z, alpha=alpha, restart_every=restart_every, planned=planned,
                                  sizes=h) if z.size else (1.0, 0, False)
    # A pass is read on the data as it stands: later slices showing the canary slower must withdraw it.
    below_p, _, below = t_sequence(margin * h - z, alpha=pass_alpha, restart_every=None, planned=planned,
                                   sizes=h, earlier_looks=False) if z.size and margin is not None else (1.0, 0, False)
    shift = float(np.sum(z * nc / h) / nc.sum()) if nc.size else 0.0
    return ShiftTest(slices=int(z.size), shift=shift, p_value=p, start_slice=start, reject=reject,
                     below_p_value=below_p, below=below)


def slice_excess(x: np.ndarray, n: np.ndarray, y: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(X_j, h_j) of the slices with requests in both arms: the canary's bad events above its share of the
    slice's, X_j = x_j − p0_j·(x_j + y_j), and the slice's information h_j = n_j·m_j/(n_j + m_j)."""
    used = (n > 0) & (m > 0)
    x, n, y, m = x[used], n[used], y[used], m[used]
    return x - n / (n + m) * (x + y), n * m / (n + m)
