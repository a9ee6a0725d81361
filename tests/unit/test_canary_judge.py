"""The judge: per-metric outcomes, split sanity, critical metrics, score, verdicts, and A/A calibration."""

from __future__ import annotations

import pytest

from observer.analyse.canary.judge import ArmData, DriftObservation, Outcome, metric_alpha
from observer.analyse.canary.verdict import judge
from observer.config.canary import CanaryMetricSpec, CanarySpec
from tests.support.canary_streams import ArmProfile, simulate_step


def _step(seconds: int = 1800, weight: float = 0.25, seed: int = 1, **canary: float) -> tuple[ArmData, ArmData]:
    ttft_scale = float(canary.pop("ttft_scale", 1.0))
    st = simulate_step(seed=seed, seconds=seconds, total_rps=20, weight=weight,
                       canary=ArmProfile(**canary) if canary else None, canary_ttft_scale=ttft_scale)
    return st.canary.window(0, seconds), st.baseline.window(0, seconds)


def _judge(c: ArmData, b: ArmData, *, spec: CanarySpec | None = None, share: float | None = 0.25):
    return judge(spec or CanarySpec(), canary="canary", baseline="stable", canary_data=c, baseline_data=b,
                 expected_share=share, now=1000.0)


def test_healthy_canary_passes_with_enough_data() -> None:
    v = _judge(*_step())
    assert v.verdict is Outcome.PASS and v.score == 100.0 and not v.critical_failed
    assert v.metric("errors").outcome is Outcome.PASS and v.metric("errors").min_n is not None
    assert v.metric("golden").outcome is Outcome.NODATA  # no quality data here: not decided, not blocking


def test_error_regression_fails_as_critical() -> None:
    v = _judge(*_step(error_rate=0.03))
    assert v.verdict is Outcome.FAIL and v.critical_failed
    assert v.metric("errors").outcome is Outcome.FAIL and "errors" in v.reason


def test_ttft_regression_fails_with_quantile_ratio() -> None:
    v = _judge(*_step(ttft_scale=1.5))
    m = v.metric("ttft")
    assert v.verdict is Outcome.FAIL and m.outcome is Outcome.FAIL
    assert m.ratio is not None and m.ci_low is not None and m.ci_low > 1.0


def test_early_look_is_inconclusive_not_pass() -> None:
    v = _judge(*_step(seconds=30))
    assert v.verdict is Outcome.INCONCLUSIVE
    assert v.metric("errors").outcome is Outcome.INCONCLUSIVE
    assert "errors" in v.reason and "/" in v.reason  # shows n / min_n


def test_no_canary_traffic_is_nodata() -> None:
    _c, b = _step(seconds=60)
    empty = ArmData(requests={"stop": 0.0}, histograms={})
    v = _judge(empty, b)
    assert v.verdict is Outcome.NODATA and "no traffic" in v.reason
    assert _judge(ArmData(note="Prometheus unreachable"), b).verdict is Outcome.NODATA


def test_split_off_makes_everything_inconclusive() -> None:
    c, b = _step(weight=0.5, error_rate=0.05)
    v = _judge(c, b, share=0.05)
    assert v.verdict is Outcome.INCONCLUSIVE and not v.split_ok and not v.critical_failed
    assert all(m.outcome in (Outcome.INCONCLUSIVE, Outcome.NODATA) for m in v.metrics)


def test_advisory_drift_is_reported_but_not_scored() -> None:
    c, b = _step()
    drifted = ArmData(requests=c.requests, histograms=c.histograms,
                      drift={"prompts": DriftObservation(drift=True, status="ok", p_value=0.001, n_current=500)})
    v = _judge(drifted, b)
    assert v.metric("drift_prompts").outcome is Outcome.FAIL
    assert v.verdict is Outcome.PASS


def test_quality_non_inferiority() -> None:
    c, b = _step()
    spec = CanarySpec(metrics=[*CanarySpec().metrics[:4],
                               CanaryMetricSpec(name="golden", kind="quality", critical=True, group="quality")])

    def with_golden(a: ArmData, passed: int, scored: int) -> ArmData:
        return ArmData(requests=a.requests, histograms=a.histograms, golden={"": (passed, scored)})

    worse = _judge(with_golden(c, 700, 1000), with_golden(b, 900, 1000), spec=spec)
    assert worse.metric("golden").outcome is Outcome.FAIL and worse.verdict is Outcome.FAIL
    same = _judge(with_golden(c, 2700, 3000), with_golden(b, 2700, 3000), spec=spec)
    assert same.metric("golden").outcome is Outcome.PASS and same.verdict is Outcome.PASS
    few = _judge(with_golden(c, 18, 20), with_golden(b, 18, 20), spec=spec)
    assert few.metric("golden").outcome is Outcome.INCONCLUSIVE and few.verdict is Outcome.INCONCLUSIVE


def test_score_below_marginal_fails_without_critical() -> None:
    c, b = _step(abort_rate=0.02, length_rate=0.15)
    v = _judge(c, b)
    assert not v.critical_failed
    assert v.metric("aborts").outcome is Outcome.FAIL and v.metric("truncations").outcome is Outcome.FAIL
    # errors group 1/3 passing, latency group 2/2 → (1/3 + 1) / 2 = 67 < 75
    assert v.verdict is Outcome.FAIL and v.score < 75


def test_metric_alpha_splits_the_budget() -> None:
    spec = CanarySpec(alpha=0.05)
    scored = [m for m in spec.metrics if not m.advisory]
    critical = [m for m in scored if m.critical]
    assert metric_alpha(spec, critical[0]) == pytest.approx(0.05 / len(critical))
    plain = next(m for m in scored if not m.critical)
    assert metric_alpha(spec, plain) == pytest.approx(0.05 / len(scored))


@pytest.mark.slow
def test_aa_false_fail_rate_at_most_one_percent() -> None:
    """200 seeded A/A canary steps (30 min, judged every 30 s at 5% and 25% weight): ≤ 1% ever fail."""
    spec = CanarySpec()
    runs, fails = 200, 0
    for seed in range(runs):
        w = 0.05 if seed % 2 == 0 else 0.25
        st = simulate_step(seed=10_000 + seed, seconds=1800, total_rps=20, weight=w)
        for _, c, b in st.looks(30):
            if judge(spec, canary="c", baseline="b", canary_data=c, baseline_data=b, expected_share=w,
                     now=0.0).verdict is Outcome.FAIL:
                fails += 1
                break
    assert fails / runs <= 0.01, f"A/A false-fail rate {fails}/{runs}"


def test_one_non_critical_failure_cannot_fail_the_verdict_alone() -> None:
    """Issue #19's case: 5% weight, early in a step, e2e alone regressed, ttft passing, every other group
    undecided: the score (latency's group alone) is below marginal 75, yet one non-critical metric tested at
    α/k must not fail."""
    spec = CanarySpec(metrics=[m for m in CanarySpec().metrics if m.name in ("errors", "ttft", "e2e", "golden")])
    seen = None
    for seed in range(40):
        st = simulate_step(seed=seed, seconds=900, total_rps=20, weight=0.05,
                           canary=ArmProfile(e2e_median=4.5))
        for _, c, b in st.looks(30):
            v = judge(spec, canary="c", baseline="b", canary_data=c, baseline_data=b, expected_share=0.05, now=0.0)
            by = {r.name: r.outcome for r in v.metrics}
            others = [r.outcome for r in v.metrics if r.group != "latency" and not r.advisory]
            if by["e2e"] is Outcome.FAIL and by["ttft"] is Outcome.PASS and all(
                    o in (Outcome.INCONCLUSIVE, Outcome.NODATA) for o in others):
                seen = v
                break
        if seen is not None:
            break
    assert seen is not None, "the situation was not built"
    assert seen.score < spec.marginal_score
    assert seen.verdict is Outcome.INCONCLUSIVE and not seen.critical_failed
    assert "one non-critical failure" in seen.reason


def test_two_non_critical_failures_below_marginal_still_fail() -> None:
    spec = CanarySpec()
    st = simulate_step(seed=3, seconds=1800, total_rps=20, weight=0.25,
                       canary=ArmProfile(e2e_median=9.0, abort_rate=0.02, length_rate=0.15))
    verdicts = [judge(spec, canary="c", baseline="b", canary_data=c, baseline_data=b, expected_share=0.25, now=0.0)
                for _, c, b in st.looks(30)]
    failing = [v for v in verdicts if v.verdict is Outcome.FAIL and not v.critical_failed]
    assert failing, [v.reason for v in verdicts[-3:]]
    assert sum(r.outcome is Outcome.FAIL for r in failing[0].metrics if not r.advisory) >= 2


def _as_old_vllm(a: ArmData) -> ArmData:
    """The arm as vLLM < 0.13 reports it: no `error` finish reason; failed requests are only HTTP 5xx."""
    import dataclasses

    def one(x: ArmData) -> ArmData:
        req = dict(x.requests or {})
        errors = req.pop("error", 0.0)
        return dataclasses.replace(x, requests=req, http_status={"2xx": sum(req.values()), "5xx": errors})

    return dataclasses.replace(one(a), slices=tuple(one(s) for s in a.slices))


def test_errors_metric_counts_5xx_where_vllm_has_no_error_finish_reason() -> None:
    """#18 item 3: an error regression on vLLM < 0.13 fails the canary through HTTP 5xx; without the 5xx
    it would pass. And a failure counted as both an `error` finish and a 500 is counted once."""
    c, b = _step(error_rate=0.03)
    old_c, old_b = _as_old_vllm(c), _as_old_vllm(b)
    v = _judge(old_c, old_b)
    assert v.metric("errors").outcome is Outcome.FAIL and v.critical_failed
    blind = CanarySpec(metrics=[m.model_copy(update={"http_5xx": False}) for m in CanarySpec().metrics])
    assert _judge(old_c, old_b, spec=blind).metric("errors").outcome is not Outcome.FAIL
    import dataclasses

    def both(x: ArmData) -> ArmData:  # new vLLM, non-streamed failures: an error finish and a 500 each
        err = (x.requests or {}).get("error", 0.0)
        return dataclasses.replace(x, http_status={"5xx": err})

    hc, hb = _step()
    same = _judge(dataclasses.replace(both(hc), slices=tuple(both(s) for s in hc.slices)),
                  dataclasses.replace(both(hb), slices=tuple(both(s) for s in hb.slices)))
    plain = _judge(hc, hb)
    assert same.metric("errors").n_canary == plain.metric("errors").n_canary
    assert same.metric("errors").outcome is plain.metric("errors").outcome is Outcome.PASS
