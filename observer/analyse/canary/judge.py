"""The canary judge's metrics: each metric of the config judged Pass/Fail/Inconclusive/Nodata on the two arms'
data. `verdict.judge` makes one verdict of them (split, critical metrics, the score), `fairness` says when the
arms cannot be compared. Pure: data in (ArmData per arm), MetricResult out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import assert_never

import numpy as np

from observer.analyse import histogram
from observer.analyse.canary import planned, pods, sequential, stats
from observer.analyse.canary.results import (
    GAUGE_VALUE,
    ROUTED_NOTE,
    ArmData,
    DriftObservation,
    MetricResult,
    Outcome,
    PairCounts,
    Verdict,
)
from observer.analyse.canary.sliced import MIN_SLICES_TO_PASS
from observer.analyse.canary.sliced import base_result as _base
from observer.analyse.canary.sliced import shown as _shown
from observer.analyse.canary.sliced import slice_outcome as _slice_outcome
from observer.analyse.canary.userfeedback import judge_feedback
from observer.collect.model import Histogram
from observer.config.canary import CanaryMetricSpec, CanarySpec, MetricKind
from observer.conventions.ratios import RatioCounts

__all__ = [
    "GAUGE_VALUE",
    "MIN_SLICES_TO_PASS",
    "ArmData",
    "DriftObservation",
    "MetricResult",
    "Outcome",
    "PairCounts",
    "Verdict",
    "judge_metric",
    "latency_edge",
    "metric_alpha",
    "metric_slices",
]

MIN_EDGE_OBSERVATIONS = 20
"""Baseline observations needed before an automatic SLO edge is placed at its quantile."""


POD_PASS_SHARE = 0.5
"""Share of the final pass bound's 1 − power that the pods-as-units test spends where the arms have per-pod data;
the pooled final bounds keep the rest, so a canary worse by the effect still passes at most 1 − power."""

JUDGE_ERROR_SHARE = 0.1
"""Golden items the judge failed to score, as a share of the window's items, above which golden cannot pass."""


def metric_alpha(spec: CanarySpec, metric: CanaryMetricSpec | None = None) -> float:
    """Per-metric α. Critical metrics share the verdict's budget (Bonferroni): one of them failing fails
    the canary. The others get budget ÷ scored metrics: they fail the canary only through the score, and
    only when SCORE_FAILURES_TO_FAIL of them failed, so their share of false fails is at most
    C(k, 2)·(α/k)² < α²/2 (a union bound over pairs) and stays negligible."""
    scored = [m for m in spec.metrics if not m.advisory]
    critical = [m for m in scored if m.critical]
    if metric is not None and metric.critical and critical:
        return spec.alpha / len(critical)
    return spec.alpha / max(len(scored), 1)


def _ratio_outcome(m: CanaryMetricSpec, bad_c: int, n_c: int, bad_b: int, n_b: int, *, alpha: float,
                   power: float, **extra: object) -> MetricResult:
    if n_c <= 0 or n_b <= 0:
        arm = "canary" if n_c <= 0 else "baseline"
        return _base(m, Outcome.NODATA, n_canary=n_c, n_baseline=n_b, detail=f"no {arm} events in the window")
    t = stats.ratio_test(bad_c, n_c, bad_b, n_b, alpha=alpha, effect_ratio=m.effect_ratio)
    min_n = stats.ratio_sample_size(base_rate=max(t.rate_baseline, m.base_rate), effect_ratio=m.effect_ratio,
                                    alpha=alpha, power=power, allocation=n_b / n_c)
    bound = stats.noninferior(bad_c, n_c, bad_b, n_b, effect_ratio=m.effect_ratio, alpha=1.0 - power,
                              base_rate=m.base_rate)
    if t.reject:
        outcome = Outcome.FAIL
    elif bound.accept:
        outcome = Outcome.PASS
    else:
        outcome = Outcome.INCONCLUSIVE
    shown = "" if outcome is Outcome.FAIL else _shown(m, bound)
    detail = "; ".join(p for p in (str(extra.pop("detail", "")), shown) if p)
    return _base(m, outcome, n_canary=n_c, n_baseline=n_b, min_n=min_n, canary=t.rate_canary,
                 baseline=t.rate_baseline, ratio=t.ratio, p_value=t.p_value, detail=detail, **extra)


def _sliced(c: ArmData, b: ArmData) -> list[tuple[ArmData, ArmData]] | None:
    if not c.slices or not b.slices:
        return None
    return list(zip(c.slices, b.slices, strict=False))


def bad_and_total(m: CanaryMetricSpec, a: ArmData) -> tuple[float, float]:
    """(bad, total) requests of one arm (or slice). With `http_4xx`, the refused requests of all requests.
    With `http_5xx`, 5xx responses beyond the finished
    errors count as bad requests the engine never finished (vLLM < 0.13 has no `error` finish reason;
    a request refused before the engine has none either): max(5xx − errors, 0) is added to both, so a
    failed request seen as both an `error` finish and a 500 is counted once."""
    match m.counts:
        case RatioCounts.SPEC_DECODE:  # draft tokens, not requests: the rejected ones are the bad events
            spec = a.spec_decode or {}
            rejected = float(spec.get("rejected", 0.0))
            return rejected, rejected + float(spec.get("accepted", 0.0))
        case RatioCounts.CORRUPTED:  # finished like any other request: in the finished count already
            return float(a.corrupted or 0.0), float(sum((a.requests or {}).values()))
        case RatioCounts.HTTP_4XX:  # refused before the engine: in no finished-request count, so added to the total
            refused = float((a.http_status or {}).get("4xx", 0.0))
            return refused, float(sum((a.requests or {}).values())) + refused
        case RatioCounts.LIVE_CHECK:
            return _checked(a, m.live_check or "")
        case RatioCounts.FINISHED_REASONS | None:
            pass
        case _:
            assert_never(m.counts)
    if a.requests is None:
        return 0.0, 0.0
    bad, total = float(sum(a.requests.get(r, 0.0) for r in m.finished_reasons)), float(sum(a.requests.values()))
    if m.http_5xx and (a.http_status or a.admission_rejections):
        # vLLM answers an admission rejection 503: it is in the 5xx count when the HTTP counters are there, and
        # a floor under it when they are not (a multi-model target), never counted twice.
        five = float((a.http_status or {}).get("5xx", 0.0)) - float(a.requests.get("error", 0.0))
        extra = max(0.0, five, float(a.admission_rejections or 0.0))
        bad, total = bad + extra, total + extra
    return bad, total


def _checked(a: ArmData, check: str) -> tuple[float, float]:
    failures, total = a.live_checks.get(check, (0, 0))
    return float(failures), float(total)


def _judge_ratio(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float,
                 plan: planned.PlannedEnd | None) -> MetricResult:
    if m.live_check is not None:
        cc, bc = c.live_checks.get(m.live_check), b.live_checks.get(m.live_check)
        if cc is None or bc is None:
            return _base(m, Outcome.NODATA, detail=f"no live check {m.live_check!r} results")
        pairs = _sliced(c, b)
        if pairs is not None and any(m.live_check in sc.live_checks for sc, _ in pairs):
            # Samples of one session or one minute share a prompt mix and a pod: the slices are the unit. The
            # t-test on slices, not the pooled test: sessions outlast a slice and goodput inherits latency's
            # bursts, and the pooled test's design effect, estimated from a few slices, then runs low (A/A
            # 6.5% on session traffic, 8.5% for goodput on bursts, at α 0.01; the t-test 0–1%).
            counts = np.array([(*_checked(sc, m.live_check), *_checked(sb, m.live_check)) for sc, sb in pairs]
                              ).reshape(-1, 4)
            return _slice_outcome(m, counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3], alpha=alpha,
                                  power=power, pooled=False, detail="sampled requests", plan=plan)
        return _ratio_outcome(m, cc[0], cc[1], bc[0], bc[1], alpha=alpha, power=power,
                              detail="samples assumed independent (no slices)")
    if m.spec_decode and (c.spec_decode is None or b.spec_decode is None):
        return _base(m, Outcome.NODATA, detail="no speculative-decoding counters (spec_decode_num_draft_tokens) in "
                                               "both arms: speculative decoding is off in one")
    if m.corrupted and (c.corrupted is None or b.corrupted is None):
        return _base(m, Outcome.NODATA, detail="no corrupted-request counter (vllm:corrupted_requests) in both arms: "
                                               "set VLLM_COMPUTE_NANS_IN_LOGITS=1 on both")
    if c.requests is None or b.requests is None:
        return _base(m, Outcome.NODATA, detail="no request counters")
    if m.http_4xx and (c.http_status is None or b.http_status is None):  # unseen refusals are not zero
        return _base(m, Outcome.NODATA, detail="no HTTP status counters (vLLM's http_requests_total) in both arms")
    pairs = _sliced(c, b)
    if pairs is not None:
        counts = np.array([(*bad_and_total(m, sc), *bad_and_total(m, sb)) for sc, sb in pairs]).reshape(-1, 4)
        return _slice_outcome(m, counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3], alpha=alpha,
                              power=power, pooled=True, plan=plan)
    (bad_c, n_c), (bad_b, n_b) = bad_and_total(m, c), bad_and_total(m, b)
    return _ratio_outcome(m, round(bad_c), round(n_c), round(bad_b), round(n_b), alpha=alpha, power=power)


def _judge_latency(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float,
                   plan: planned.PlannedEnd | None) -> MetricResult:
    assert m.family is not None
    hc, hb = c.histograms.get(m.family), b.histograms.get(m.family)
    if hc is None or hb is None or hc.count <= 0 or hb.count <= 0:
        return _base(m, Outcome.NODATA, n_canary=round(hc.count) if hc else 0,
                     n_baseline=round(hb.count) if hb else 0, detail=f"no {m.family} observations")
    le, why = latency_edge(m, hb)
    if le is None:
        return _base(m, Outcome.INCONCLUSIVE, n_canary=round(hc.count), n_baseline=round(hb.count), detail=why)
    try:
        above_c, n_c = histogram.fraction_above(hc, le)
        above_b, n_b = histogram.fraction_above(hb, le)
    except KeyError:
        return _base(m, Outcome.NODATA, detail=f"no bucket edge le={le!r} in both arms")
    q = stats.quantile_ratio(hc, hb, m.quantile, alpha=alpha)
    pairs = _sliced(c, b)
    if pairs is not None:
        # Two views at α/2 each: the share above the SLO edge, and a shift of the whole distribution.
        counts = np.array([(*_above(sc, m.family, le), *_above(sb, m.family, le)) for sc, sb in pairs]
                          ).reshape(-1, 4)
        bins = _bins(pairs, m.family, hb.bounds)
        a_any, a_end = (alpha / 2.0, 0.0) if plan is None else plan.split(alpha / 2.0)
        # A pass also rules out a shift of `shift_margin`, at the pass bound's 1 − power (no split: both views
        # must pass, so a canary that bad passes at most as often as either allows).
        b_any, b_end = (1.0 - power, 0.0) if plan is None else plan.split_pass(1.0 - power)
        shift = None if bins is None else sequential.shift_test(bins[0], bins[1], alpha=a_any,
                                                                margin=m.shift_margin, pass_alpha=b_any)
        shift_end = shift_below_end = pod = None
        share, pod_note = 1.0, ""
        if shift is not None and plan is not None and plan.reached:
            pod, pod_note = pods.pod_shift(c.pods, b.pods, m.family, hb.bounds, slices=plan.slices,
                                           margin=m.shift_margin, alpha=b_end * POD_PASS_SHARE)
            share = 1.0 if pod is None else 1.0 - POD_PASS_SHARE
            end_bins = _bins(pairs[:plan.slices], m.family, hb.bounds)
            if end_bins is not None:
                z, h, _ = sequential.shift_values(*end_bins)
                shift_end, shift_below_end = planned.final_shift(
                    z, h, margin=m.shift_margin, alpha=a_end, beta=b_end * share * planned.SLICES_PASS_SHARE)
        res = _slice_outcome(m, counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3],
                             alpha=alpha if shift is None else alpha / 2.0, power=power,
                             detail=f"share above le={le}", shift=shift, shift_end=shift_end,
                             shift_below_end=shift_below_end, plan=plan, pod=pod, end_pass_share=share,
                             pod_note=pod_note if c.pods or b.pods else "")
    else:
        extra: dict[str, object] = {"detail": f"share above le={le}; requests assumed independent"}
        res = _ratio_outcome(m, round(above_c), round(n_c), round(above_b), round(n_b), alpha=alpha,
                             power=power, **extra)
    if q is None:
        return res
    # The metric's ratio is the quantile ratio (what people read); its interval is at the metric's α.
    return MetricResult(**{**res.__dict__, "ratio": q.estimate, "ci_low": q.low, "ci_high": q.high})


def latency_edge(m: CanaryMetricSpec, baseline: Histogram) -> tuple[str | None, str]:
    """The `le` a latency metric is judged at (configured, or at the baseline's quantile), or None and why."""
    if m.le is not None:
        return m.le, ""
    if baseline.count < MIN_EDGE_OBSERVATIONS:
        return None, "too few baseline observations to place the SLO edge"
    le = stats.auto_edge(baseline, m.quantile)
    return (le, "") if le is not None else (None, f"baseline q{m.quantile} is above the highest finite edge")


def metric_slices(m: CanaryMetricSpec, c: ArmData, b: ArmData) -> np.ndarray | None:
    """The per-slice counts a sliced test of `m` reads, one row per slice, oldest first: (bad canary,
    canary total, bad baseline, baseline total). None when `m` is not a bad-event metric or has no slices."""
    pairs = _sliced(c, b)
    if pairs is None:
        return None
    if m.kind == MetricKind.RATIO:
        if m.live_check is not None:
            check = m.live_check
            rows = [(*_checked(sc, check), *_checked(sb, check)) for sc, sb in pairs]
        else:
            rows = [(*bad_and_total(m, sc), *bad_and_total(m, sb)) for sc, sb in pairs]
    elif m.kind == MetricKind.LATENCY and m.family is not None:
        hb = b.histograms.get(m.family)
        le = None if hb is None or hb.count <= 0 else latency_edge(m, hb)[0]
        if le is None:
            return None
        rows = [(*_above(sc, m.family, le), *_above(sb, m.family, le)) for sc, sb in pairs]
    else:
        return None
    return np.array(rows, dtype=float).reshape(-1, 4)


def _above(a: ArmData, family: str, le: str) -> tuple[float, float]:
    h = a.histograms.get(family)
    if h is None or h.count <= 0:
        return 0.0, 0.0
    try:
        above, n = histogram.fraction_above(h, le)
    except KeyError:
        return 0.0, 0.0
    return float(round(above)), float(round(n))


def _bins(pairs: Sequence[tuple[ArmData, ArmData]], family: str, bounds: tuple[float, ...]
          ) -> tuple[np.ndarray, np.ndarray] | None:
    """Non-cumulative bucket counts per slice of both arms, from slices on the window's bucket layout."""
    rows_c, rows_b = [], []
    for sc, sb in pairs:
        hc, hs = sc.histograms.get(family), sb.histograms.get(family)
        if hc is None or hs is None or hc.bounds != bounds or hs.bounds != bounds:
            continue
        rows_c.append(np.diff(np.asarray(hc.cumulative, dtype=float), prepend=0.0))
        rows_b.append(np.diff(np.asarray(hs.cumulative, dtype=float), prepend=0.0))
    if not rows_c:
        return None
    return np.clip(np.array(rows_c), 0.0, None), np.clip(np.array(rows_b), 0.0, None)


def _judge_quality(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float
                   ) -> MetricResult:
    key = m.golden_set or ""
    gc, gb = c.golden.get(key), b.golden.get(key)
    if gc is None or gb is None or gc[1] <= 0 or gb[1] <= 0:
        return _base(m, Outcome.NODATA, detail="no scored golden items in both arms")
    (pc, nc), (pb, nb) = gc, gb
    ci = stats.difference_sequence(pc, nc, pb, nb, alpha=alpha, tau=m.margin)
    rate = pb / nb if 0 < pb < nb else m.expected_pass_rate
    min_n = stats.noninferiority_sample_size(pass_rate=rate, margin=m.margin, alpha=alpha, power=power,
                                             allocation=nb / nc)
    # A judge that failed on many items mid-step leaves the rest a biased sample (the hard answers are the
    # long ones it times out on): no pass on what it did score.
    errors = c.golden_judge_errors.get(key, 0) + b.golden_judge_errors.get(key, 0)
    failing_judge = errors > JUDGE_ERROR_SHARE * (errors + nc + nb)
    detail = f"pass-rate difference, non-inferiority margin {m.margin}"
    if ci.high < 0:
        outcome = Outcome.FAIL
    elif ci.low > -m.margin and nc >= min_n and not failing_judge:
        outcome = Outcome.PASS
    else:
        outcome = Outcome.INCONCLUSIVE
    if failing_judge:
        detail += f"; the judge failed on {errors} of {errors + nc + nb} items in the window: no pass"
    return _base(m, outcome, n_canary=nc, n_baseline=nb, min_n=min_n, canary=pc / nc, baseline=pb / nb,
                 ratio=None, ci_low=ci.low, ci_high=ci.high, detail=detail)


def _judge_drift(m: CanaryMetricSpec, c: ArmData) -> MetricResult:
    assert m.field is not None
    d = c.drift.get(m.field)
    if d is None:
        return _base(m, Outcome.NODATA, detail=f"no drift result for {m.field}")
    if d.status != "ok":
        return _base(m, Outcome.NODATA, n_canary=d.n_current, detail=f"drift {d.status}")
    return _base(m, Outcome.FAIL if d.drift else Outcome.PASS, n_canary=d.n_current, p_value=d.p_value,
                 canary=d.statistic, detail="drift detected" if d.drift else "no drift")


def _judge_cost(m: CanaryMetricSpec, c: ArmData, b: ArmData) -> MetricResult:
    pc, pb = c.cost_per_million_tokens, b.cost_per_million_tokens
    if pc is None or pb is None or pb <= 0:
        return _base(m, Outcome.NODATA, canary=pc, baseline=pb,
                     detail="no cost per token for both arms (cost prices, DCGM or tokens missing)")
    ratio = pc / pb
    return _base(m, Outcome.FAIL if ratio > m.max_ratio else Outcome.PASS, canary=pc, baseline=pb, ratio=ratio,
                 detail=f"cost per million generated tokens {pc:.4g} vs {pb:.4g} ({ratio:.2f}×, fails above "
                        f"{m.max_ratio:g}×; a point estimate)")


def _judge_paired(m: CanaryMetricSpec, c: ArmData, *, alpha: float) -> MetricResult:
    counts = c.paired.get(m.paired_check)
    if counts is None or counts.wins + counts.losses + counts.ties + counts.inconsistent == 0:
        why = c.paired_note or "no paired comparisons (quality.shadow replays none to this canary)"
        return _base(m, Outcome.NODATA, detail=why, evidence=None if counts is None else counts.evidence())
    t = stats.paired_test(counts.losses, counts.wins, alpha=alpha, effect_share=m.effect_share)
    need = stats.paired_sample_size(effect_share=m.effect_share, alpha=alpha)
    if t.reject:
        outcome = Outcome.FAIL
    elif counts.decided >= need:
        outcome = Outcome.PASS
    else:
        outcome = Outcome.INCONCLUSIVE
    what = "pairwise judge (both orders)" if m.paired_check == "judge" else f"rule check {m.paired_check}"
    parts = [f"{what}: canary lost {counts.losses}, won {counts.wins}, tied {counts.ties}",
             f"{counts.inconsistent} position-inconsistent", f"{counts.errors} undecided (errors)"]
    if outcome is Outcome.INCONCLUSIVE:
        parts.append(f"a pass needs {need} decided pairs")
    if c.paired_note:
        parts.append(c.paired_note)
    return _base(m, outcome, n_canary=counts.decided, min_n=need, canary=t.loss_share,
                 baseline=0.5 if counts.decided else None, p_value=t.p_value, detail="; ".join(parts),
                 evidence=counts.evidence())


def judge_metric(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float,
                 plan: planned.PlannedEnd | None = None) -> MetricResult:
    """Judge one metric of the canary against the baseline; a nodata metric of an arm read from its router
    (ArmData.routed_requests) says so. `plan`: the step's planned end, for the sliced tests (planned.py)."""
    r = _judge_metric(m, c, b, alpha=alpha, power=power, plan=plan)
    if r.outcome is Outcome.NODATA and (c.routed_requests or b.routed_requests):
        return replace(r, detail=f"{r.detail}: {ROUTED_NOTE}" if r.detail else ROUTED_NOTE)
    return r


def _judge_metric(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float,
                  plan: planned.PlannedEnd | None) -> MetricResult:
    match m.kind:
        case MetricKind.PAIRED:
            return _judge_paired(m, c, alpha=alpha)
        case MetricKind.COST:
            return _judge_cost(m, c, b)
        case MetricKind.RATIO:
            return _judge_ratio(m, c, b, alpha=alpha, power=power, plan=plan)
        case MetricKind.LATENCY:
            return _judge_latency(m, c, b, alpha=alpha, power=power, plan=plan)
        case MetricKind.QUALITY:
            return _judge_quality(m, c, b, alpha=alpha, power=power)
        case MetricKind.DRIFT:
            return _judge_drift(m, c)
        case MetricKind.FEEDBACK:
            return judge_feedback(m, c, b, alpha=alpha, power=power, plan=plan)
        case _:
            assert_never(m.kind)
