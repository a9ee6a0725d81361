"""The pass side of the canary judge: a metric passes when the data show the canary less than effect_ratio×
worse (stats.noninferior, sequentially valid at 1 − power), the verdict waits for metrics that could still
fail, live checks are tested on slices, and a decode-speed regression fails the default verdict."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from observer.analyse.canary import sequential, stats
from observer.analyse.canary.judge import MIN_SLICES_TO_PASS, ArmData, Outcome, judge_metric
from observer.analyse.canary.sources import OwnSource
from observer.analyse.canary.verdict import WAIT_SLICES, judge
from observer.analyse.quality.state import QualityState
from observer.analyse.signals.model import SliceTotals
from observer.config.canary import CanaryMetricSpec, CanarySpec
from observer.conventions import vllm
from tests.support.canary_streams import any_step
from tests.support.quality_streams import quality_step


def _looks(rate_c: float, rate_b: float, *, seed: int, looks: int = 30, per_look: int = 60, weight: float = 0.25
           ) -> bool:
    """Whether the bound accepted at any of `looks` cumulative looks on iid Bernoulli requests."""
    rng = np.random.default_rng(seed)
    xc = nc = xb = nb = 0
    for _ in range(looks):
        c, b = rng.binomial(1, weight, per_look * 20).sum(), 0
        b = per_look * 20 - c
        xc += rng.binomial(c, rate_c)
        xb += rng.binomial(b, rate_b)
        nc, nb = nc + c, nb + b
        if stats.noninferior(xc, nc, xb, nb, effect_ratio=2.0, alpha=0.2, base_rate=0.01).accept:
            return True
    return False


def test_a_canary_exactly_effect_ratio_worse_is_accepted_at_most_alpha_over_all_looks() -> None:
    accepted = sum(_looks(0.04, 0.02, seed=s) for s in range(300))
    assert accepted / 300 <= 0.2 + 0.05  # α = 1 − power, plus binomial noise on 300 trials


def test_a_healthy_canary_is_accepted_within_the_step() -> None:
    accepted = sum(_looks(0.02, 0.02, seed=s) for s in range(100))
    assert accepted >= 95


def test_no_bad_events_below_base_rate_tests_the_canary_alone() -> None:
    none = stats.noninferior(0, 5000, 0, 15000, effect_ratio=2.0, alpha=0.2, base_rate=0.01)
    assert none.accept
    few = stats.noninferior(0, 20, 0, 60, effect_ratio=2.0, alpha=0.2, base_rate=0.01)
    assert not few.accept  # 20 clean requests cannot show a rate below 2%
    worse = stats.noninferior(150, 5000, 0, 15000, effect_ratio=2.0, alpha=0.2, base_rate=0.01)
    assert not worse.accept  # 3% is above 2 × 1%


def test_a_design_effect_slows_the_pass() -> None:
    args = (30, 3000, 90, 9000)
    assert stats.noninferior(*args, effect_ratio=2.0, alpha=0.2).accept
    assert not stats.noninferior(*args, effect_ratio=2.0, alpha=0.2, design_effect=8.0).accept


def _arm(slices: list[tuple[int, int]], check: str = "refusal") -> ArmData:
    parts = tuple(ArmData(requests={"stop": float(n)}, live_checks={check: (f, n)}) for f, n in slices)
    f, n = sum(x for x, _ in slices), sum(y for _, y in slices)
    return ArmData(requests={"stop": float(n)}, live_checks={check: (f, n)}, slices=parts)


REFUSALS = CanaryMetricSpec(name="refusals", kind="ratio", live_check="refusal", base_rate=0.02, critical=True)


def test_live_checks_are_tested_on_slices() -> None:
    """Two sessions of refusals on the canary (a user asking for the same forbidden thing 15 times in a
    minute): counted as independent samples they fail it; on slices they are two bad minutes among 30."""
    canary = [(0, 20)] * 9 + [(15, 20)] + [(0, 20)] * 9 + [(15, 20)] + [(0, 20)] * 10
    baseline = [(1, 60)] * 30
    c, b = _arm(canary), _arm(baseline)
    sliced = judge_metric(REFUSALS, c, b, alpha=0.005, power=0.8)
    assert sliced.outcome is not Outcome.FAIL and sliced.slices == 30
    assert sliced.design_effect is not None and sliced.design_effect > 3
    flat = judge_metric(REFUSALS, ArmData(requests=c.requests, live_checks=c.live_checks),
                        ArmData(requests=b.requests, live_checks=b.live_checks), alpha=0.005, power=0.8)
    assert flat.outcome is Outcome.FAIL and "independent" in flat.detail


def test_a_live_check_worse_in_every_slice_still_fails() -> None:
    c, b = _arm([(3, 20)] * 20), _arm([(1, 60)] * 20)
    assert judge_metric(REFUSALS, c, b, alpha=0.005, power=0.8).outcome is Outcome.FAIL


def test_the_verdict_waits_for_a_metric_that_could_still_fail() -> None:
    """Latency and errors decided and passing; goodput's samples came in late (three slices so far): it
    could not have failed yet, so the canary does not pass on the other metrics' evidence alone."""
    spec = CanarySpec()
    st = any_step(seed=3, model="iid", seconds=1800, total_rps=20, weight=0.25)
    at = {}
    for t, c, b in st.looks(60):
        def late(a: ArmData, n: int, *, t: int = t) -> ArmData:
            slices = tuple(ArmData(requests=s.requests, histograms=s.histograms,
                                   live_checks={"goodput": (0, n)} if i >= t // 60 - 3 else {})
                           for i, s in enumerate(a.slices))
            return ArmData(requests=a.requests, histograms=a.histograms, slices=slices,
                           live_checks={"goodput": (0, 3 * n)})
        v = judge(spec, canary="c", baseline="b", canary_data=late(c, 20), baseline_data=late(b, 60),
                  expected_share=0.25, now=float(t))
        at[t // 60] = v
    early = [v for m, v in at.items() if m < WAIT_SLICES]
    assert all(v.verdict is not Outcome.PASS for v in early)
    assert any("waiting for" in v.reason and "goodput 3/" in v.reason for v in early)
    assert at[30].verdict is Outcome.PASS  # past WAIT_SLICES a too-sparse metric no longer holds it
    assert at[30].metric("goodput").slices is not None and at[30].metric("goodput").slices < MIN_SLICES_TO_PASS


@pytest.mark.parametrize("model", ["iid", "production"])
def test_a_decode_speed_regression_fails_the_default_verdict(model: str) -> None:
    """Time per output token ×1.5, TTFT and errors unchanged: the default config fails it on itl."""
    st = any_step(seed=11, model=model, seconds=1800, total_rps=20, weight=0.25, canary_itl_scale=1.5)
    verdicts = [judge(CanarySpec(), canary="c", baseline="b", canary_data=c, baseline_data=b,
                      expected_share=0.25, now=float(t)) for t, c, b in st.looks(60)]
    failed = [v for v in verdicts if v.verdict is Outcome.FAIL]
    assert failed and failed[0].critical_failed and failed[0].metric("itl").outcome is Outcome.FAIL
    assert failed[0].metric("ttft").outcome is not Outcome.FAIL


def _shifted_bins(shift: float, *, seed: int, slices: int = 30) -> tuple[np.ndarray, np.ndarray]:
    """Per-slice bucket counts, baseline uniform over 10 buckets; the canary a mixture of it and the top bucket
    whose ridit shift (ties ½) is exactly `shift`: the baseline part's mean ridit is ½, the top's 0.95."""
    rng = np.random.default_rng(seed)
    pb = np.full(10, 0.1)
    lam = shift / 0.45
    pc = (1.0 - lam) * pb + lam * np.eye(10)[-1]
    return (np.stack([rng.multinomial(rng.poisson(50), pc) for _ in range(slices)]),
            np.stack([rng.multinomial(rng.poisson(150), pb) for _ in range(slices)]))


def test_the_shift_bound_passes_a_canary_at_the_margin_at_most_beta_over_all_looks() -> None:
    """t_sequence keeps the running maximum: one call on 30 slices is every look up to 30."""
    def below(shift: float, seed: int) -> bool:
        return sequential.shift_test(*_shifted_bins(shift, seed=seed), alpha=0.01, margin=0.1, pass_alpha=0.2).below

    at_margin = sum(below(0.1, s) for s in range(300))
    assert at_margin / 300 <= 0.2 + 0.05  # β, plus binomial noise on 300 trials
    healthy = sum(below(0.0, s) for s in range(100))
    assert healthy >= 95


def test_a_canary_slower_everywhere_does_not_pass_on_its_share_above_the_edge() -> None:
    """TTFT ×1.5 at 5% weight on per-pod queues: its share above the default edge stays under what the share
    bound tolerates (base_rate × effect_ratio) for long stretches while the shift's fail test has not yet
    rejected, so the share bound alone passes most steps at some look. The shift bound (the pass must rule
    out a shift of `shift_margin`) holds them; with the bound out of any shift's reach they pass again."""
    ttft = next(m for m in CanarySpec().metrics if m.name == "ttft")
    unbounded = ttft.model_copy(update={"shift_margin": 0.49})
    passed = {"default": 0, "unbounded": 0}
    for seed in range(8):
        st = any_step(seed=seed, model="pod_queues", seconds=1800, total_rps=20, weight=0.05, canary_ttft_scale=1.5)
        looks = [(c, b) for _, c, b in st.looks(60)]
        for name, m in (("default", ttft), ("unbounded", unbounded)):
            passed[name] += any(judge_metric(m, c, b, alpha=0.0025, power=0.8).outcome is Outcome.PASS
                                for c, b in looks)
    assert passed["unbounded"] >= 6, passed  # the scenario does reach the share bound's pass
    assert passed["default"] <= 2, passed


class _Slices:
    """A SignalsReader with three one-minute slices of request counters and nothing else."""

    def histogram_delta(self, version: str, family: str, *, since: float) -> None:
        return None

    def labelled_counter_delta(self, version: str, family: str, *, since: float) -> dict[str, float]:
        return {"stop": 300.0}

    def served_models(self, version: str) -> dict[str, dict[str, str]]:
        return {}

    def slices(self, version: str, *, since: float, until: float, step: float, histograms: object,
               labelled: object) -> list[SliceTotals]:
        return [SliceTotals(start=a, end=a + 60.0, histograms={}, labelled={vllm.REQUEST_SUCCESS: {"stop": 100.0}})
                for a in (0.0, 60.0, 120.0)]

    def latest(self, version: str) -> None:
        return None


def test_the_own_source_cuts_live_checks_on_the_request_slices() -> None:
    state = QualityState(versions=["canary"], golden_sets=[], live_checks=["refusal"])
    state.record_live("canary", "refusal", [(10.0, True), (50.0, False), (61.0, True), (119.9, True),
                                            (130.0, False), (200.0, True)])
    src = OwnSource(signals=_Slices(), quality=state)
    arm = asyncio.run(src.arm("canary", CanarySpec().metrics, since=0.0, now=180.0, with_drift=False))
    assert [s.live_checks["refusal"] for s in arm.slices] == [(1, 2), (2, 2), (0, 1)]
    assert arm.live_checks["refusal"] == (4, 6)  # the window's totals keep what came after the last slice


def test_session_traffic_live_checks_hold_their_false_fail_rate_on_slices() -> None:
    """A/A steps whose refusals come in sessions of related prompts that stick to one arm: as independent
    samples the refusal test false-fails often at α 0.01; on slices it stays within its budget."""
    live = [m for m in CanarySpec().metrics if m.live_check in ("refusal", "empty", "invalid_json")]
    sliced = flat = 0
    for seed in range(60):
        step = any_step(seed=seed, model="iid", seconds=1800, total_rps=20, weight=0.25)
        q = quality_step(step, seed=seed, model="session")
        looks = [(q.arm("canary", c, t), q.arm("baseline", b, t)) for t, c, b in step.looks(60)]
        sliced += any(judge_metric(m, c, b, alpha=0.01, power=0.8).outcome is Outcome.FAIL
                      for c, b in looks for m in live)
        flat += any(judge_metric(m, ArmData(requests=c.requests, live_checks=c.live_checks),
                                 ArmData(requests=b.requests, live_checks=b.live_checks), alpha=0.01,
                                 power=0.8).outcome is Outcome.FAIL for c, b in looks for m in live)
    assert flat >= 3, flat  # the dependence is real: the per-sample test is fooled by it
    assert sliced <= 1, sliced


GOLDEN = CanaryMetricSpec(name="golden", kind="quality", critical=True)


def test_a_judge_failing_mid_step_keeps_golden_from_passing() -> None:
    """Golden passes on 3,000 scored items a side; the same window with the judge failing on 800 more items
    is inconclusive, never pass: what it still scored is not the sample the step planned."""
    ok_c, ok_b = ArmData(golden={"": (2700, 3000)}), ArmData(golden={"": (2700, 3000)})
    assert judge_metric(GOLDEN, ok_c, ok_b, alpha=0.005, power=0.8).outcome is Outcome.PASS
    broken = ArmData(golden={"": (2700, 3000)}, golden_judge_errors={"": 800})
    r = judge_metric(GOLDEN, broken, ok_b, alpha=0.005, power=0.8)
    assert r.outcome is Outcome.INCONCLUSIVE and "judge failed on 800" in r.detail
    worse = ArmData(golden={"": (1500, 3000)}, golden_judge_errors={"": 800})
    assert judge_metric(GOLDEN, worse, ok_b, alpha=0.005, power=0.8).outcome is Outcome.FAIL  # evidence stands


def test_the_own_source_reads_golden_judge_errors_per_window() -> None:
    from tests.unit.test_quality_export import item, run

    state = QualityState(versions=["canary"], golden_sets=["factual"], live_checks=[])
    state.record_golden(run("canary", [item(0, passed=True), item(1, passed=None, judge_error=True)], started=50.0))
    state.record_golden(run("canary", [item(0, passed=True), item(1, passed=None, judge_error=True),
                                       item(2, passed=None, judge_error=True)], started=150.0))
    assert state.golden_judge_errors("canary", since=100.0) == 2
    src = OwnSource(signals=_Slices(), quality=state)
    arm = asyncio.run(src.arm("canary", CanarySpec().metrics, since=0.0, now=180.0, with_drift=False))
    assert arm.golden[""] == (2, 2) and arm.golden_judge_errors[""] == 3
