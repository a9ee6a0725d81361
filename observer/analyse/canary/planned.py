"""Planned looks: when a step has a known end, the sliced tests spend most of their α there.

Argo, Flagger and a pipeline all decide at the end of a step (an AnalysisRun's count × interval, Flagger's
analysis, the job's deadline). The anytime-valid tests of `sequential` and `stats` pay for every minute as a
possible last look; a step with a planned end uses a Haybittle–Peto-type design instead:

* `INTERIM_SHARE` of each test's α (`PASS_INTERIM_SHARE` of the pass bound's 1 − power) goes to the
  anytime-valid test at every look, before the end and after it. It is valid for any number and timing of
  looks, so a gross regression still fails in minutes, and a step stopped early by hand, or extended past its
  end, spends nothing more.
* `END_SHARE` goes to one fixed-horizon test on the first `slices` slices, made at every look from the planned
  end on. It reads the same slices each time, so it is one test however often it is read.

The two are joined by a union bound: a canary no worse than its baseline fails at some look with probability at
most α, whatever the looks. An O'Brien–Fleming spending function puts its α at the end the same way (at 30
equally spaced looks it spends about 1% of it by mid-step), but its boundaries assume a Gaussian statistic with
independent increments; the anytime-valid interim test assumes nothing about when, or how often, anyone looks.
docs/canary.md ("Planned looks") has the figures.

Dependence is honoured as in the anytime tests: slices are the units (the t-tests' variance comes from their
spread; the pooled ratio and the pass bound are deflated by the slices' design effect).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from observer.analyse.canary import stats
from observer.analyse.canary.sequential import dependence_blocks, slice_excess, worse_share

INTERIM_SHARE = 0.1
"""Share of each sliced test's α spent by the anytime-valid test at the interim looks (and after the end)."""

PASS_INTERIM_SHARE = 0.5
"""Share of the pass bound's 1 − power spent by the anytime-valid bound at every look; the rest is the final
bound's at the planned end. The fail side keeps most of its α for the end because the decision is made there;
a pass is wanted as early as the data show it (a healthy canary promoted in minutes), so the pass side keeps
half for the early looks. The union bound holds the power promise: a canary worse by the effect passes at
most 1 − power of the time."""

SLICES_PASS_SHARE = 0.5
"""Share of the final pass bound's 1 − power that its slice t-test spends (final_noninferior_slices): the lower
tail of a t-test on right-skewed slice counts is liberal, and at its full share a canary exactly at the effect
passed 14% of the time at a nominal 10% on overdispersed slices (tests/unit/test_canary_planned.py)."""

END_SHARE = 0.5
"""Share of each sliced test's α spent by the fixed-horizon test at the planned end. The remaining 0.4 is a
margin for what that test assumes and cannot check at 3 a.m.: a design effect estimated from the step's own
slices, a t-test on skewed slice excesses, blocks of slices that are only nearly independent. The anytime tests
have that margin built in (a mixture pays for looks never made). At 90% a first trial of the verdict failed 1 and
3 of 40 A/A steps on iid, and over 4,000 `occupancy` steps the final shift test on inter-token latency rejected
0.67% at a nominal 0.2% (docs/canary.md, "Planned looks")."""

MIN_PLANNED_SLICES = 10
"""A planned end this many slices from the analysis start, or later: fewer cannot carry a pass (the pooled
ratio test and the pass both need 10 slices), and the anytime-valid tests are kept."""

END_TOLERANCE_SECONDS = 1.0
"""A look this close before the planned end counts as reaching it (clock jitter of the gate's schedule)."""


@dataclass(frozen=True)
class PlannedEnd:
    """Where this look stands against the step's planned end."""

    slices: int
    """K: the slices from the analysis start to the planned end; the final test reads the first K."""
    reached: bool
    """This look is at or after the planned end: the final test is made."""

    def split(self, alpha: float) -> tuple[float, float]:
        """(interim, final) shares of a fail test's `alpha`."""
        return alpha * INTERIM_SHARE, alpha * END_SHARE

    def split_pass(self, beta: float) -> tuple[float, float]:
        """(interim, final) shares of the pass bound's `beta` (1 − power)."""
        return beta * PASS_INTERIM_SHARE, beta * (1.0 - PASS_INTERIM_SHARE)


def plan(*, step_seconds: float | None, elapsed_seconds: float | None, slice_seconds: float,
         window_seconds: float) -> tuple[PlannedEnd | None, str]:
    """The plan for a look `elapsed_seconds` after the analysis start, and the design in words (the verdict's
    `looks`). None, with why, when the anytime-valid tests apply: no planned end, no start to count it from,
    one too short to judge on, or one past the window (whose start would move, so the first K slices would
    change from look to look)."""
    if step_seconds is None:
        return None, "anytime-valid: no planned end (the gate gave no step length)"
    if elapsed_seconds is None:
        return None, (f"anytime-valid: a step of {step_seconds:g} s with no start to count it from (the gate "
                      "gave no `since`)")
    k = math.floor((step_seconds + END_TOLERANCE_SECONDS) / slice_seconds)
    if k < MIN_PLANNED_SLICES:
        return None, (f"anytime-valid: the planned end ({step_seconds:g} s) is under {MIN_PLANNED_SLICES} "
                      f"slices of {slice_seconds:g} s")
    if step_seconds > window_seconds:
        return None, (f"anytime-valid: the planned end ({step_seconds:g} s) is past canary.window_seconds "
                      f"({window_seconds:g} s)")
    if elapsed_seconds > window_seconds:
        return None, (f"anytime-valid: the step started {elapsed_seconds:.0f} s ago, past canary.window_seconds "
                      f"({window_seconds:g} s): the window no longer holds its first slices")
    reached = elapsed_seconds + END_TOLERANCE_SECONDS >= step_seconds
    where = "final look" if reached else f"{max(step_seconds - elapsed_seconds, 0.0):.0f} s to the end"
    past = elapsed_seconds - step_seconds
    if reached and past > END_TOLERANCE_SECONDS + slice_seconds:
        where = f"{past:.0f} s past the end: the final test stands, the anytime-valid share goes on"
    return PlannedEnd(slices=k, reached=reached), (
        f"planned end at {k} slices ({where}); α {END_SHARE:.0%} at the end, {INTERIM_SHARE:.0%} at every look")


@dataclass(frozen=True)
class FinalTest:
    """The fixed-horizon test at the planned end."""

    p_value: float
    reject: bool


def final_t(xs: np.ndarray, sizes: np.ndarray, *, alpha: float) -> FinalTest:
    """One-sided Student t-test of "mean excess ≤ 0" on slice values `xs` with weights `sizes` (the regression
    through the origin of sequential.t_sequence, read once): t = θ̂ / se(θ̂), on the dependence blocks of the
    slices (sequential.dependence_blocks), B − 1 degrees of freedom for B blocks."""
    from scipy import special  # lazy: scipy.stats costs ~60 MB of RSS in the sidecar
    x, h, _ = dependence_blocks(np.asarray(xs, dtype=float), np.asarray(sizes, dtype=float))
    if x.size < 5 or np.any(h <= 0):
        return FinalTest(1.0, False)
    h = h / h.mean()
    z, root = x / np.sqrt(h), np.sqrt(h)
    info = float(h.sum())
    theta = float(np.sum(root * z)) / info
    resid = z - theta * root
    s2 = float(np.sum(resid * resid)) / (x.size - 1)
    if s2 <= 0:
        return FinalTest(0.0 if theta > 0 else 1.0, theta > 0)
    t = theta / math.sqrt(s2 / info)
    p = float(special.stdtr(x.size - 1, -t))
    return FinalTest(p, p <= alpha)


def final_slices(x: np.ndarray, n: np.ndarray, y: np.ndarray, m: np.ndarray, *, alpha: float) -> FinalTest:
    """The final t-test on per-slice bad-event counts (the canary's excess over its share, as slice_test)."""
    xs, h = slice_excess(x, n, y, m)
    return final_t(xs, h, alpha=alpha)


def _binom_sf(k: float, trials: float, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(trials, p), continuous in k and trials (deflated counts): I_p(k, trials − k + 1)."""
    from scipy import special
    if k <= 0:
        return 1.0
    if k > trials:
        return 0.0
    return float(special.betainc(k, trials - k + 1.0, p))


def _binom_cdf(k: float, trials: float, p: float) -> float:
    """P(X ≤ k) for X ~ Binomial(trials, p), continuous: I_{1−p}(trials − k, k + 1)."""
    from scipy import special
    if k >= trials:
        return 1.0
    return float(special.betainc(trials - k, max(k, 0.0) + 1.0, 1.0 - p))


def final_ratio(bad_c: float, n_c: float, bad_b: float, n_b: float, *, deff: float, alpha: float) -> FinalTest:
    """The exact conditional test on counts ÷ `deff`, read once: a bad event is the canary's with probability
    p0 = its share of requests under "no worse"; P(canary's share of the events ≥ observed)."""
    events = (bad_c + bad_b) / deff
    if n_c <= 0 or n_b <= 0 or events <= 0:
        return FinalTest(1.0, False)
    p = _binom_sf(bad_c / deff, events, n_c / (n_c + n_b))
    return FinalTest(p, p <= alpha)


def final_noninferior(bad_c: float, n_c: float, bad_b: float, n_b: float, *, effect_ratio: float, alpha: float,
                      deff: float, base_rate: float) -> FinalTest:
    """The pass bound read once: "the canary is at least `effect_ratio`× worse" rejected (a pass) when the
    canary's share of the bad events, or below the base rate its own rate, is that unlikely for such a canary.
    The same hypotheses as stats.noninferior, on the same deflated counts."""
    if n_c <= 0 or n_b <= 0 or deff <= 0:
        return FinalTest(1.0, False)
    xc, xb = max(bad_c, 0.0) / deff, max(bad_b, 0.0) / deff
    if bad_b / n_b < base_rate:
        p = _binom_cdf(xc, n_c / deff, min(effect_ratio * base_rate, 0.999))
        return FinalTest(p, p <= alpha)
    if xc + xb <= 0:
        return FinalTest(1.0, False)
    p = _binom_cdf(xc, xc + xb, float(worse_share(n_c / (n_c + n_b), effect_ratio)))
    return FinalTest(p, p <= alpha)


def final_noninferior_slices(x: np.ndarray, n: np.ndarray, y: np.ndarray, m: np.ndarray, *, effect_ratio: float,
                             alpha: float, base_rate: float) -> FinalTest:
    """The pass bound read once on slices, for the metrics whose fail test is the slices' t-test (latency
    shares, live checks): "at least `effect_ratio`× worse" rejected when the slices' excess over that is shown
    negative. Per slice, D_j = x_j − p_R,j·(x_j + y_j), p_R the canary's share of the bad events of a canary
    `effect_ratio`× worse (or, below `base_rate`, D_j = x_j − effect_ratio·base_rate·n_j), is ≥ 0 on average
    for a canary at least that bad; −D_j is tested as final_t tests an excess. Its spread comes from the
    slices, as the fail test's does: a design effect in the thousands (inter-token latencies, one observation
    per token of requests that share a pod's busy minutes) then says what the slices say, where deflated
    counts would leave a handful of units and no pass."""
    x, n, y, m = (np.asarray(a, dtype=float) for a in (x, n, y, m))
    used = (n > 0) & (m > 0)
    x, n, y, m = x[used], n[used], y[used], m[used]
    if x.size < 5:
        return FinalTest(1.0, False)
    if float(y.sum()) / float(m.sum()) < base_rate:
        d, h = x - min(effect_ratio * base_rate, 0.999) * n, n
    else:
        d, h = x - worse_share(n / (n + m), effect_ratio) * (x + y), n * m / (n + m)
    return final_t(-d, h, alpha=alpha)


def final_shift(z: np.ndarray, h: np.ndarray, *, margin: float, alpha: float, beta: float
                ) -> tuple[FinalTest, FinalTest]:
    """(shifted, shifted by less than `margin`) fixed-horizon tests of a latency distribution's shift on the
    planned step's slices: `z` each slice's shift statistic and `h` its weight (sequential.shift_values); the
    pass side tests `margin`·h − z as final_t tests an excess."""
    return final_t(z, h, alpha=alpha), final_t(margin * h - z, h, alpha=beta)


def final_tests(x: np.ndarray, n: np.ndarray, y: np.ndarray, m: np.ndarray, *, alpha: float, beta: float,
                pooled: bool, effect_ratio: float, base_rate: float) -> tuple[FinalTest, FinalTest]:
    """(worse, less than `effect_ratio`× worse) fixed-horizon tests on the planned step's slices: for the pooled
    ratio metrics the deflated-count tests, for the rest (`pooled` False) the slices' t-tests."""
    t = stats.slice_test(x, n, y, m, alpha=alpha, pooled=True)  # pooled: its design effect, no t-sequence
    deff = t.design_effect or 1.0
    sums = (float(x.sum()), float(n.sum()), float(y.sum()), float(m.sum()))
    if not pooled:
        worse = final_slices(x, n, y, m, alpha=alpha)
    elif t.design_effect is not None and t.slices >= stats.POOLED_MIN_SLICES:
        worse = final_ratio(*sums, deff=deff, alpha=alpha)
    else:
        worse = FinalTest(1.0, False)
    if pooled:
        better = final_noninferior(*sums, effect_ratio=effect_ratio, alpha=beta, deff=deff, base_rate=base_rate)
    else:
        better = final_noninferior_slices(x, n, y, m, effect_ratio=effect_ratio, alpha=beta * SLICES_PASS_SHARE,
                                          base_rate=base_rate)
    return worse, better
