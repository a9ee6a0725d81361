"""The canary judge: per-metric Pass/Fail/Inconclusive/Nodata, split sanity, critical metrics, a
Kayenta-style weighted score and one verdict. Pure: data in (ArmData per arm), Verdict out."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import assert_never

import numpy as np

from observer.analyse import histogram
from observer.analyse.canary import stats
from observer.analyse.canary.results import (
    GAUGE_VALUE,
    ArmData,
    DriftObservation,
    MetricResult,
    Outcome,
    PairCounts,
    Verdict,
)
from observer.collect.model import Histogram
from observer.config.canary import CanaryMetricSpec, CanarySpec, FairnessSpec, MetricKind

__all__ = [
    "GAUGE_VALUE",
    "ArmData",
    "DriftObservation",
    "MetricResult",
    "Outcome",
    "PairCounts",
    "Verdict",
    "engine_trouble",
    "judge",
    "judge_metric",
    "latency_edge",
    "metric_alpha",
    "metric_slices",
    "mute_unfair_latency",
    "per_pod_load_ratio",
]

MIN_EDGE_OBSERVATIONS = 20
"""Baseline observations needed before an automatic SLO edge is placed at its quantile."""


MIN_SLICES_TO_PASS = 10
"""Slices before a metric may pass: with fewer, no slice test could have failed a bad canary (the
t-test needs ≥ 5, the pooled ratio test 10), so Pass would be a pass by construction."""

DEFF_PRIOR_SLICES = 10
"""Slices' worth of weight on "no dependence" (design effect 1) when the sample size is inflated."""

WAIT_SLICES = stats.PLANNED_SLICES
"""How long (window slices) the verdict waits for a sliced metric to reach MIN_SLICES_TO_PASS slices with
data before it may pass without it: a metric that could still fail holds the pass until it could have failed,
but one too sparse to get there within a step must not hold a healthy canary forever."""

JUDGE_ERROR_SHARE = 0.1
"""Golden items the judge failed to score, as a share of the window's items, above which golden cannot pass."""

SCORE_FAILURES_TO_FAIL = 2
"""Non-critical metrics fail the canary only through the score *and* only when at least this many failed."""


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


def _base(m: CanaryMetricSpec, outcome: Outcome, **kw: object) -> MetricResult:
    return MetricResult(name=m.name, kind=m.kind, outcome=outcome, critical=m.critical, advisory=m.advisory,
                        group=m.group, **kw)  # type: ignore[arg-type]


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


def _shown(m: CanaryMetricSpec, bound: stats.BoundTest) -> str:
    """Why a metric that has not failed passed (or what a pass still needs)."""
    if bound.accept:
        return f"shown less than {m.effect_ratio:g}× worse (p={bound.p_value:.2g})"
    return f"not yet shown less than {m.effect_ratio:g}× worse (p={bound.p_value:.2g})"


def _slice_outcome(m: CanaryMetricSpec, x: np.ndarray, n: np.ndarray, y: np.ndarray, mm: np.ndarray, *,
                   alpha: float, power: float, detail: str = "", shift: stats.ShiftTest | None = None,
                   pooled: bool = False) -> MetricResult:
    n_c, n_b = round(float(n.sum())), round(float(mm.sum()))
    if n_c <= 0 or n_b <= 0:
        arm = "canary" if n_c <= 0 else "baseline"
        return _base(m, Outcome.NODATA, n_canary=n_c, n_baseline=n_b, detail=f"no {arm} events in the window")
    bad_c, bad_b = float(x.sum()), float(y.sum())
    rate_c, rate_b = bad_c / n_c, bad_b / n_b
    min_n = stats.ratio_sample_size(base_rate=max(rate_b, m.base_rate), effect_ratio=m.effect_ratio,
                                    alpha=alpha, power=power, allocation=n_b / n_c)
    t = stats.slice_test(x, n, y, mm, alpha=alpha, pooled=pooled)
    deff = t.design_effect or 1.0
    # The sample size grows with the design effect, shrunk towards 1 while few slices measure it.
    needed = math.ceil(min_n * (1.0 + (deff - 1.0) * t.slices / (t.slices + DEFF_PRIOR_SLICES)))
    p_value = t.p_value if shift is None else min(1.0, 2.0 * min(t.p_value, shift.p_value))
    # The pass side: the data show the canary less than effect_ratio× worse, at 1 − power (a canary that
    # bad passes at most that often, at any number of looks). `needed` is only shown: the planned sample.
    bound = stats.noninferior(bad_c, n_c, bad_b, n_b, effect_ratio=m.effect_ratio, alpha=1.0 - power,
                              design_effect=deff, base_rate=m.base_rate)
    if t.reject or (shift is not None and shift.reject):
        outcome = Outcome.FAIL
    elif bound.accept and t.slices >= MIN_SLICES_TO_PASS:
        outcome = Outcome.PASS
    else:
        outcome = Outcome.INCONCLUSIVE
    parts = [p for p in (detail, f"{t.slices} slices, design effect {deff:.3g}") if p]
    if outcome is not Outcome.FAIL:
        parts.append(_shown(m, bound))
    if outcome is Outcome.INCONCLUSIVE and t.slices < MIN_SLICES_TO_PASS:
        parts.append(f"a pass needs {MIN_SLICES_TO_PASS} slices")
    if t.reject and t.start_slice > 0:
        parts.append(f"worse since slice {t.start_slice}")
    if shift is not None:
        parts.append(f"distribution shift {shift.shift:+.3f}" + (" (fail)" if shift.reject else ""))
        if shift.reject and shift.start_slice > 0:
            parts.append(f"shifted since slice {shift.start_slice}")
    return _base(m, outcome, n_canary=n_c, n_baseline=n_b, min_n=needed, canary=rate_c, baseline=rate_b,
                 ratio=rate_c / rate_b if rate_b > 0 else None, p_value=p_value, detail="; ".join(parts),
                 design_effect=t.design_effect, slices=t.slices,
                 worse_since=t.start_slice if t.reject and t.start_slice > 0 else None)


def _sliced(c: ArmData, b: ArmData) -> list[tuple[ArmData, ArmData]] | None:
    if not c.slices or not b.slices:
        return None
    return list(zip(c.slices, b.slices, strict=False))


def _bad(m: CanaryMetricSpec, a: ArmData) -> tuple[float, float]:
    """(bad, total) requests of one arm (or slice). With `http_4xx`, the refused requests of all requests.
    With `http_5xx`, 5xx responses beyond the finished
    errors count as bad requests the engine never finished (vLLM < 0.13 has no `error` finish reason;
    a request refused before the engine has none either): max(5xx − errors, 0) is added to both, so a
    failed request seen as both an `error` finish and a 500 is counted once."""
    if m.spec_decode:  # draft tokens, not requests: the rejected ones are the bad events
        spec = a.spec_decode or {}
        rejected = float(spec.get("rejected", 0.0))
        return rejected, rejected + float(spec.get("accepted", 0.0))
    if m.corrupted:  # finished like any other request: in the finished count already
        return float(a.corrupted or 0.0), float(sum((a.requests or {}).values()))
    if m.http_4xx:  # refused before the engine: in no finished-request count, so added to the total
        refused = float((a.http_status or {}).get("4xx", 0.0))
        return refused, float(sum((a.requests or {}).values())) + refused
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


def _judge_ratio(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float) -> MetricResult:
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
                                  power=power, pooled=False, detail="sampled requests")
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
        counts = np.array([(*_bad(m, sc), *_bad(m, sb)) for sc, sb in pairs]).reshape(-1, 4)
        return _slice_outcome(m, counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3], alpha=alpha,
                              power=power, pooled=True)
    (bad_c, n_c), (bad_b, n_b) = _bad(m, c), _bad(m, b)
    return _ratio_outcome(m, round(bad_c), round(n_c), round(bad_b), round(n_b), alpha=alpha, power=power)


def _judge_latency(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float
                   ) -> MetricResult:
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
        shift = None if bins is None else stats.shift_test(bins[0], bins[1], alpha=alpha / 2.0)
        res = _slice_outcome(m, counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3],
                             alpha=alpha if shift is None else alpha / 2.0, power=power,
                             detail=f"share above le={le}", shift=shift)
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
            rows = [(*_bad(m, sc), *_bad(m, sb)) for sc, sb in pairs]
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


def judge_metric(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float) -> MetricResult:
    """Judge one metric of the canary against the baseline."""
    match m.kind:
        case MetricKind.PAIRED:
            return _judge_paired(m, c, alpha=alpha)
        case MetricKind.COST:
            return _judge_cost(m, c, b)
        case MetricKind.RATIO:
            return _judge_ratio(m, c, b, alpha=alpha, power=power)
        case MetricKind.LATENCY:
            return _judge_latency(m, c, b, alpha=alpha, power=power)
        case MetricKind.QUALITY:
            return _judge_quality(m, c, b, alpha=alpha, power=power)
        case MetricKind.DRIFT:
            return _judge_drift(m, c)
        case _:
            assert_never(m.kind)


def score(results: Sequence[MetricResult], weights: Mapping[str, float]) -> tuple[float, int]:
    """Kayenta-style score: per group passing ÷ decided, weighted over groups with a decided metric."""
    num = den = 0.0
    decided = 0
    for group in sorted({r.group for r in results}):
        rs = [r for r in results if r.group == group and not r.advisory
              and r.outcome in (Outcome.PASS, Outcome.FAIL)]
        if not rs:
            continue
        decided += len(rs)
        w = weights.get(group, 1.0)
        num += w * sum(1 for r in rs if r.outcome is Outcome.PASS) / len(rs)
        den += w
    return (100.0 * num / den if den > 0 else 0.0), decided


def _describe(r: MetricResult) -> str:
    parts = [f"{r.name} {r.outcome}"]
    if r.kind == "latency" and r.detail:
        parts.append(f"({r.detail})")
    if r.canary is not None and r.baseline is not None:
        parts.append(f"canary {r.canary:.4g} vs baseline {r.baseline:.4g}")
    if r.kind == "latency" and r.ratio is not None:
        parts.append(f"quantile ratio {r.ratio:.3g}")
    if r.p_value is not None:
        parts.append(f"p={r.p_value:.2g}")
    return " ".join(parts)


def judge(spec: CanarySpec, *, canary: str, baseline: str, canary_data: ArmData, baseline_data: ArmData,
          expected_share: float | None, now: float) -> Verdict:
    """Judge the canary against the baseline over one window of data."""
    power = spec.power
    n_c, n_b = canary_data.total_requests, baseline_data.total_requests

    def verdict(outcome: Outcome, results: Sequence[MetricResult], reason: str, *, score_value: float = 0.0,
                critical_failed: bool = False, split_ok: bool = True, share: float | None = None) -> Verdict:
        return Verdict(canary=canary, baseline=baseline, verdict=outcome, score=score_value,
                       critical_failed=critical_failed, n_canary=n_c or 0, n_baseline=n_b or 0,
                       split_ok=split_ok, canary_share=share, expected_share=expected_share,
                       metrics=tuple(results), reason=reason, evaluated_at=now,
                       window_seconds=spec.window_seconds, judge=canary_data.judge_identity)

    results = [judge_metric(m, canary_data, baseline_data, alpha=metric_alpha(spec, m), power=power)
               for m in spec.metrics]
    unfair = environment_mismatch(spec, canary_data, baseline_data)
    results = mute_unfair_latency(spec, results, canary_data, baseline_data)
    note = canary_data.note or baseline_data.note
    asleep = [f"the {arm}'s engines are asleep (vLLM sleep mode, {a.replicas_asleep} replica(s))"
              for arm, a in (("canary", canary_data), ("baseline", baseline_data)) if _asleep(a)]
    if asleep:
        return verdict(Outcome.IDLE, _muted(results), "; ".join(asleep) + ": nothing to compare until they wake")
    trouble = engine_trouble(canary_data, baseline_data)
    if trouble and (not n_c or not n_b):
        return verdict(Outcome.INCONCLUSIVE, _muted(results), "engine trouble: " + "; ".join(trouble))
    if n_c is None or n_b is None:
        return verdict(Outcome.NODATA, results, note or "no request counters for "
                       + ("the canary" if n_c is None else "the baseline"))
    if n_c == 0:
        return verdict(Outcome.NODATA, results, "the canary received no traffic in the window")
    if n_b == 0:
        return verdict(Outcome.NODATA, results, "the baseline received no traffic in the window")
    split_ok, share = True, n_c / (n_c + n_b)
    if expected_share is not None:
        split_ok, share = stats.split_check(n_c, n_b, expected=expected_share, tolerance=spec.split_tolerance,
                                            min_requests=spec.split_min_requests)
    value, decided = score(results, spec.groups)
    routed = [f"{arm} router: {a.router_trouble}" for arm, a in (("canary", canary_data), ("baseline", baseline_data))
              if a.router_trouble]
    if routed:
        # Requests held at a saturated router wait whatever version they go to: only what the router itself
        # measured (router_ttft, gateway queueing included) may still fail, when it is critical.
        failed_router = [r for r in results if r.outcome is Outcome.FAIL and r.critical
                         and _family(spec, r.name) == "router_ttft"]
        if failed_router:
            return verdict(Outcome.FAIL, results, "critical metric failed: "
                           + "; ".join(_describe(r) for r in failed_router), score_value=value,
                           critical_failed=True, share=share)
        return verdict(Outcome.INCONCLUSIVE, _muted(results), "arms are not comparable: " + "; ".join(routed),
                       score_value=value, share=share)
    if unfair:
        return verdict(Outcome.INCONCLUSIVE, _muted(results), "arms are not comparable: " + "; ".join(unfair),
                       score_value=value, share=share)
    if not split_ok:
        return verdict(Outcome.INCONCLUSIVE, _muted(results), f"traffic split off: canary share {share:.3g}, "
                       f"expected {expected_share:.3g}", score_value=value, split_ok=False, share=share)
    scored = [r for r in results if not r.advisory]
    critical = [r for r in scored if r.critical]
    failed_critical = [r for r in critical if r.outcome is Outcome.FAIL]
    if failed_critical:
        return verdict(Outcome.FAIL, results, "critical metric failed: "
                       + "; ".join(_describe(r) for r in failed_critical),
                       score_value=value, critical_failed=True, share=share)
    failed = [r for r in scored if r.outcome is Outcome.FAIL]
    if value < spec.marginal_score and len(failed) >= SCORE_FAILURES_TO_FAIL:
        return verdict(Outcome.FAIL, results, f"score {value:.0f} below marginal {spec.marginal_score:.0f}: "
                       + "; ".join(_describe(r) for r in failed), score_value=value, share=share)
    if trouble:  # a failure above stands (users saw it); a pass cannot, on engines that are not serving
        return verdict(Outcome.INCONCLUSIVE, _muted(results), "engine trouble: " + "; ".join(trouble),
                       score_value=value, share=share)
    if decided == 0:
        if all(r.outcome is Outcome.NODATA for r in scored):
            return verdict(Outcome.NODATA, results, "no metric has data", share=share)
        return verdict(Outcome.INCONCLUSIVE, results, "not enough data yet: "
                       + _pending(scored), score_value=value, share=share)
    if value < spec.marginal_score:
        # One non-critical metric, tested at α/k, must not fail the step alone: the step's budget is α.
        return verdict(Outcome.INCONCLUSIVE, results, f"score {value:.0f} below marginal "
                       f"{spec.marginal_score:.0f} on one non-critical failure (a fail needs "
                       f"{SCORE_FAILURES_TO_FAIL}): " + "; ".join(_describe(r) for r in failed),
                       score_value=value, share=share)
    undecided_critical = [r for r in critical if r.outcome is not Outcome.PASS]
    if undecided_critical:
        return verdict(Outcome.INCONCLUSIVE, results, "critical metric(s) not decided yet: "
                       + _pending(undecided_critical), score_value=value, share=share)
    waiting = _waiting(scored, len(canary_data.slices))
    if waiting:
        return verdict(Outcome.INCONCLUSIVE, results, "waiting for metric(s) that could still fail: "
                       + ", ".join(f"{r.name} {r.slices}/{MIN_SLICES_TO_PASS} slices" for r in waiting),
                       score_value=value, share=share)
    if value >= spec.pass_score:
        return verdict(Outcome.PASS, results, f"score {value:.0f} ≥ {spec.pass_score:.0f}; "
                       f"{decided} metric(s) decided", score_value=value, share=share)
    return verdict(Outcome.INCONCLUSIVE, results, f"marginal score {value:.0f}: "
                   + "; ".join(_describe(r) for r in scored if r.outcome is Outcome.FAIL),
                   score_value=value, share=share)


def _family(spec: CanarySpec, name: str) -> str | None:
    return next((m.family for m in spec.metrics if m.name == name), None)


def _asleep(a: ArmData) -> bool:
    """Every replica of the arm sleeps (a partly asleep arm still serves, and is judged)."""
    return a.replicas_asleep > 0 and (a.replicas is None or a.replicas_asleep >= a.replicas)


def engine_trouble(c: ArmData, b: ArmData) -> list[str]:
    """Unhealthy or hung engines in either arm: a comparison that cannot pass (what it measured was not serving)."""
    out = []
    for arm, a in (("canary", c), ("baseline", b)):
        if a.replicas_unhealthy:
            out.append(f"{a.replicas_unhealthy} {arm} replica(s) report an unhealthy engine (vLLM engine_healthy 0)")
        if a.replicas_hung:
            out.append(f"{a.replicas_hung} {arm} replica(s) hung: requests running, none finished")
    return out


def _waiting(scored: Sequence[MetricResult], window_slices: int) -> list[MetricResult]:
    """Scored sliced metrics with data that are undecided and have too few slices to have failed yet (the
    slice tests cannot reject before POOLED_MIN_SLICES / five slices): a pass now would be a pass by
    construction for them. Only while the window is shorter than WAIT_SLICES."""
    if window_slices >= WAIT_SLICES:
        return []
    return [r for r in scored if r.outcome is Outcome.INCONCLUSIVE and r.slices is not None
            and r.slices < MIN_SLICES_TO_PASS]


def _muted(results: Sequence[MetricResult]) -> list[MetricResult]:
    """Every decided result made inconclusive (the arms cannot be compared), nodata kept."""
    return [MetricResult(**{**r.__dict__, "outcome": Outcome.INCONCLUSIVE}) if r.outcome is not Outcome.NODATA
            else r for r in results]


def environment_mismatch(spec: CanarySpec, c: ArmData, b: ArmData) -> list[str]:
    """The `fairness.same_environment` facts both arms report and that differ."""
    out = []
    for key in spec.fairness.same_environment:
        vc, vb = c.environment.get(key), b.environment.get(key)
        if vc and vb and vc != vb:
            out.append(f"{key} differs: canary {vc[:80]!r} vs baseline {vb[:80]!r}")
    return out


def mute_unfair_latency(spec: CanarySpec, results: Sequence[MetricResult], c: ArmData, b: ArmData
                        ) -> list[MetricResult]:
    """Latency results that unequal per-pod load or a warming canary would bias, made inconclusive."""
    f = spec.fairness
    mute: dict[Outcome, str] = {}
    if f.warmup_hit_ratio_gap is not None and c.prefix_cache_hit_ratio is not None \
            and b.prefix_cache_hit_ratio is not None \
            and b.prefix_cache_hit_ratio - c.prefix_cache_hit_ratio > f.warmup_hit_ratio_gap:
        why = (f"canary still warming up: prefix-cache hit ratio {c.prefix_cache_hit_ratio:.2f} vs baseline "
               f"{b.prefix_cache_hit_ratio:.2f}")
        mute[Outcome.FAIL] = mute[Outcome.PASS] = why
    ratio = per_pod_load_ratio(f, c, b)
    n_c, n_b = c.total_requests or 0, b.total_requests or 0
    if ratio is not None and n_c + n_b >= spec.split_min_requests:
        load = (f"per-pod load canary {ratio:.2g}× baseline ({n_c} requests on {c.replicas} pod(s) vs {n_b} "
                f"on {b.replicas})")
        assert f.per_pod_load_tolerance is not None
        if ratio > 1.0 + f.per_pod_load_tolerance:
            mute.setdefault(Outcome.FAIL, load)
        elif ratio < 1.0 / (1.0 + f.per_pod_load_tolerance):
            mute.setdefault(Outcome.PASS, load)
    # Cost per token depends on load per pod at any sample size (a canary pod at a low weight idles).
    cost_reason = None
    if ratio is not None and f.per_pod_load_tolerance is not None \
            and not 1.0 / (1.0 + f.per_pod_load_tolerance) <= ratio <= 1.0 + f.per_pod_load_tolerance:
        cost_reason = f"per-pod load canary {ratio:.2g}× baseline: cost per token depends on it"
    if not mute and cost_reason is None:
        return list(results)
    out = []
    for r in results:
        if r.kind == "cost" and cost_reason is not None and r.outcome in (Outcome.PASS, Outcome.FAIL):
            out.append(MetricResult(**{**r.__dict__, "outcome": Outcome.INCONCLUSIVE,
                                       "detail": f"{r.detail}; not judged: {cost_reason}"}))
            continue
        reason = mute.get(r.outcome) if r.kind == "latency" else None
        out.append(r if reason is None else MetricResult(
            **{**r.__dict__, "outcome": Outcome.INCONCLUSIVE, "detail": f"{r.detail}; not judged: {reason}"}))
    return out


def per_pod_load_ratio(f: FairnessSpec, c: ArmData, b: ArmData) -> float | None:
    """Requests per pod, canary ÷ baseline; None when the check is off or either arm lacks pods or requests."""
    n_c, n_b = c.total_requests, b.total_requests
    if f.per_pod_load_tolerance is None or not (c.replicas and b.replicas and n_c and n_b):
        return None
    return (n_c / c.replicas) / (n_b / b.replicas)


def _pending(results: Sequence[MetricResult]) -> str:
    parts = []
    for r in results:
        if r.outcome is Outcome.INCONCLUSIVE and r.min_n is not None:
            parts.append(f"{r.name} {r.n_canary}/{r.min_n}")
        elif r.outcome in (Outcome.INCONCLUSIVE, Outcome.NODATA):
            parts.append(f"{r.name} {r.outcome}")
    return ", ".join(parts) or "none"


