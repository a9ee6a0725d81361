"""One verdict from the judged metrics: split sanity, fairness, critical metrics, a Kayenta-style weighted score.
Pure: data in (ArmData per arm), Verdict out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from observer.analyse.canary import absolute, planned, sequential, stats
from observer.analyse.canary.fairness import (
    all_asleep,
    engine_trouble,
    environment_mismatch,
    mute_unfair_latency,
    pods_missing,
)
from observer.analyse.canary.judge import MIN_SLICES_TO_PASS, judge_metric, metric_alpha
from observer.analyse.canary.results import ArmData, MetricResult, Outcome, Verdict
from observer.config.canary import CanarySpec
from observer.conventions.labels import EngineState

WAIT_SLICES = sequential.PLANNED_SLICES
"""How long (window slices) the verdict waits for a sliced metric to reach MIN_SLICES_TO_PASS slices with
data before it may pass without it: a metric that could still fail holds the pass until it could have failed,
but one too sparse to get there within a step must not hold a healthy canary forever."""

SCORE_FAILURES_TO_FAIL = 2
"""Non-critical metrics fail the canary only through the score *and* only when at least this many failed."""


def score(results: Sequence[MetricResult], weights: Mapping[str, float]) -> tuple[float, int]:
    """Kayenta-style score: per group passing ÷ decided, weighted over groups with a decided metric."""
    num = den = 0.0
    decided = 0
    for group in sorted({r.group for r in results}):
        rs = [r for r in results if r.group == group and not r.advisory and r.kind != absolute.KIND
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
    if r.kind == absolute.KIND:
        return f"{r.name} {r.outcome} ({r.detail})"
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
          expected_share: float | None, now: float, step_seconds: float | None = None,
          elapsed_seconds: float | None = None, objectives: Sequence[absolute.Objective] = ()) -> Verdict:
    """Judge the canary against the baseline over one window of data. `step_seconds`: the step's planned
    length from the analysis start, `elapsed_seconds` since that start (the window's first slice): with both,
    the sliced tests spend most of their α at the planned end (planned.py). `objectives`: the SLOs the canary
    is held to on its own (absolute.py; canary.slo_check)."""
    power = spec.power
    plan, looks = planned.plan(step_seconds=step_seconds, elapsed_seconds=elapsed_seconds,
                               slice_seconds=spec.slice_seconds, window_seconds=spec.window_seconds)
    n_c, n_b = canary_data.total_requests, baseline_data.total_requests

    def verdict(outcome: Outcome, results: Sequence[MetricResult], reason: str, *, score_value: float = 0.0,
                critical_failed: bool = False, split_ok: bool = True, share: float | None = None) -> Verdict:
        return Verdict(canary=canary, baseline=baseline, verdict=outcome, score=score_value,
                       critical_failed=critical_failed, n_canary=n_c or 0, n_baseline=n_b or 0,
                       split_ok=split_ok, canary_share=share, expected_share=expected_share,
                       metrics=tuple(results), reason=reason, evaluated_at=now,
                       window_seconds=spec.window_seconds, judge=canary_data.judge_identity, looks=looks)

    results = [judge_metric(m, canary_data, baseline_data, alpha=metric_alpha(spec, m), power=power, plan=plan)
               for m in spec.metrics]
    results += absolute.checks(objectives, canary, canary_data, margin=spec.slo_check.margin,
                               alpha=absolute.alpha(spec), beta=1.0 - power, plan=plan)
    unfair = environment_mismatch(spec, canary_data, baseline_data)
    results = mute_unfair_latency(spec, results, canary_data, baseline_data)
    note = canary_data.note or baseline_data.note
    asleep = [f"the {arm}'s engines are asleep (vLLM sleep mode, {a.in_state(EngineState.ASLEEP)} replica(s))"
              for arm, a in (("canary", canary_data), ("baseline", baseline_data)) if all_asleep(a)]
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
    missing = pods_missing(canary_data)
    if missing:  # likewise: a failure stands, a pass would promote what the cluster cannot run
        return verdict(Outcome.INCONCLUSIVE, _muted(results), f"pods not arriving: {missing}", score_value=value,
                       share=share)
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
    over = [r for r in critical if r.kind == absolute.KIND and r.outcome is Outcome.INCONCLUSIVE]
    if over:
        return verdict(Outcome.INCONCLUSIVE, results, "held to its SLO objective: "
                       + "; ".join(f"{r.name} {r.detail}" for r in over), score_value=value, share=share)
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


def _pending(results: Sequence[MetricResult]) -> str:
    parts = []
    for r in results:
        if r.outcome is Outcome.INCONCLUSIVE and r.min_n is not None:
            parts.append(f"{r.name} {r.n_canary}/{r.min_n}")
        elif r.outcome in (Outcome.INCONCLUSIVE, Outcome.NODATA):
            parts.append(f"{r.name} {r.outcome}")
    return ", ".join(parts) or "none"
