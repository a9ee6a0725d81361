"""The slice test's outcome for one metric: the anytime-valid slice t-test (or the pooled ratio test with its
design effect), the pass bound, the planned end's final tests, the latency shift and the pods-as-units pass,
made one Pass/Fail/Inconclusive with its detail. Shared by the ratio and latency metrics (judge.py) and by
users' feedback (userfeedback.py)."""

from __future__ import annotations

import math

import numpy as np

from observer.analyse.canary import planned, pods, sequential, stats
from observer.analyse.canary.results import MetricResult, Outcome
from observer.config.canary import CanaryMetricSpec

MIN_SLICES_TO_PASS = 10
"""Slices before a metric may pass: with fewer, no slice test could have failed a bad canary (the
t-test needs ≥ 5, the pooled ratio test 10), so Pass would be a pass by construction."""

DEFF_PRIOR_SLICES = 10
"""Slices' worth of weight on "no dependence" (design effect 1) when the sample size is inflated."""


def base_result(m: CanaryMetricSpec, outcome: Outcome, **kw: object) -> MetricResult:
    return MetricResult(name=m.name, kind=m.kind, outcome=outcome, critical=m.critical, advisory=m.advisory,
                        group=m.group, **kw)  # type: ignore[arg-type]


def shown(m: CanaryMetricSpec, bound: stats.BoundTest) -> str:
    """Why a metric that has not failed passed (or what a pass still needs)."""
    if bound.accept:
        return f"shown less than {m.effect_ratio:g}× worse (p={bound.p_value:.2g})"
    return f"not yet shown less than {m.effect_ratio:g}× worse (p={bound.p_value:.2g})"


def slice_outcome(m: CanaryMetricSpec, x: np.ndarray, n: np.ndarray, y: np.ndarray, mm: np.ndarray, *,
                   alpha: float, power: float, detail: str = "", shift: sequential.ShiftTest | None = None,
                   shift_end: planned.FinalTest | None = None, shift_below_end: planned.FinalTest | None = None,
                   pooled: bool = False, plan: planned.PlannedEnd | None = None,
                   pod: pods.PodShift | None = None, pod_note: str = "", end_pass_share: float = 1.0
                   ) -> MetricResult:
    n_c, n_b = round(float(n.sum())), round(float(mm.sum()))
    if n_c <= 0 or n_b <= 0:
        arm = "canary" if n_c <= 0 else "baseline"
        return base_result(m, Outcome.NODATA, n_canary=n_c, n_baseline=n_b, detail=f"no {arm} events in the window")
    bad_c, bad_b = float(x.sum()), float(y.sum())
    rate_c, rate_b = bad_c / n_c, bad_b / n_b
    min_n = stats.ratio_sample_size(base_rate=max(rate_b, m.base_rate), effect_ratio=m.effect_ratio,
                                    alpha=alpha, power=power, allocation=n_b / n_c)
    # With a planned end, the anytime-valid tests keep a share of α and of 1 − power; the rest is the final test's.
    a_any, a_end = (alpha, 0.0) if plan is None else plan.split(alpha)
    b_any, b_end = (1.0 - power, 0.0) if plan is None else plan.split_pass(1.0 - power)
    b_end *= end_pass_share
    t = stats.slice_test(x, n, y, mm, alpha=a_any, pooled=pooled)
    deff = t.design_effect or 1.0
    # The sample size grows with the design effect, shrunk towards 1 while few slices measure it.
    needed = math.ceil(min_n * (1.0 + (deff - 1.0) * t.slices / (t.slices + DEFF_PRIOR_SLICES)))
    # The pass side: the data show the canary less than effect_ratio× worse, at 1 − power (a canary that
    # bad passes at most that often, at any number of looks). `needed` is only shown: the planned sample.
    bound = stats.noninferior(bad_c, n_c, bad_b, n_b, effect_ratio=m.effect_ratio, alpha=b_any,
                              design_effect=deff, base_rate=m.base_rate)
    end_fail = end_pass = None
    if plan is not None and plan.reached:
        k = plan.slices
        end_fail, end_pass = planned.final_tests(x[:k], n[:k], y[:k], mm[:k], alpha=a_end, beta=b_end, pooled=pooled,
                                                 effect_ratio=m.effect_ratio, base_rate=m.base_rate)
    shares = [(t.p_value, a_any / alpha)]
    if end_fail is not None:
        shares.append((end_fail.p_value, a_end / alpha))
    p_value = min(1.0, min(p / share for p, share in shares))
    if shift is not None:
        shift_p = min(1.0, min(shift.p_value / (a_any / alpha),
                               math.inf if shift_end is None else shift_end.p_value / (a_end / alpha)))
        p_value = min(1.0, 2.0 * min(p_value, shift_p))
    failed = t.reject or bool(end_fail and end_fail.reject)
    shifted = shift is not None and (shift.reject or bool(shift_end and shift_end.reject))
    # The pass side of the shift, as its fail side: the anytime bound, or the final one at the planned end.
    below = shift is None or shift.below or bool(shift_below_end and shift_below_end.reject)
    if failed or shifted:
        outcome = Outcome.FAIL
    elif t.slices >= MIN_SLICES_TO_PASS and (((bound.accept or bool(end_pass and end_pass.reject)) and below)
                                             or (pod is not None and pod.accept)):
        outcome = Outcome.PASS
    else:
        outcome = Outcome.INCONCLUSIVE
    parts = [p for p in (detail, f"{t.slices} slices, design effect {deff:.3g}") if p]
    if outcome is not Outcome.FAIL:
        parts.append(shown(m, bound))
    if end_fail is not None and end_pass is not None:
        parts.append(f"final test on the first {plan.slices if plan else 0} slices: worse p={end_fail.p_value:.2g}, "
                     f"less than {m.effect_ratio:g}× worse p={end_pass.p_value:.2g}")
    if outcome is Outcome.INCONCLUSIVE and t.slices < MIN_SLICES_TO_PASS:
        parts.append(f"a pass needs {MIN_SLICES_TO_PASS} slices")
    if t.reject and t.start_slice > 0:
        parts.append(f"worse since slice {t.start_slice}")
    if shift is not None:
        parts.append(f"distribution shift {shift.shift:+.3f}" + (" (fail)" if shifted else ""))
        if outcome is not Outcome.FAIL:
            by_end = shift_below_end is not None and shift_below_end.reject and not shift.below
            below_p = shift_below_end.p_value if by_end and shift_below_end else shift.below_p_value
            parts.append(("shown" if below else "not yet shown") + f" under {m.shift_margin:+g} (p={below_p:.2g})")
        if shift.reject and shift.start_slice > 0:
            parts.append(f"shifted since slice {shift.start_slice}")
    if pod is not None or pod_note:
        parts.append(pod.describe(m.shift_margin) if pod is not None else f"pods not units: {pod_note}")
    return base_result(m, outcome, n_canary=n_c, n_baseline=n_b, min_n=needed, canary=rate_c, baseline=rate_b,
                 ratio=rate_c / rate_b if rate_b > 0 else None, p_value=p_value, detail="; ".join(parts),
                 design_effect=t.design_effect, slices=t.slices,
                 worse_since=t.start_slice if t.reject and t.start_slice > 0 else None)
