"""Planned looks: the fixed-horizon tests at a step's planned end, the plan's fallbacks, the error budget with
steps stopped early or run on at random, and the gates that give the step's length."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from scipy import stats as sps

from observer.analyse.canary import planned, sequential
from observer.analyse.canary.judge import ArmData, Outcome, judge_metric
from observer.analyse.canary.service import STEP_FORGET_SECONDS, CanaryService
from observer.config import parse_config
from observer.config.canary import CanaryMetricSpec
from observer.export import canary_api
from observer.export.flagger_api import BadPayload, parse_payload
from tests.support.canary_streams import PAIR_FLEET, StreamSource

ERRORS = CanaryMetricSpec(name="errors", kind="ratio", finished_reasons=["error"], critical=True)


def test_the_plan_falls_back_to_anytime_tests_and_says_why() -> None:
    kw: dict[str, Any] = {"slice_seconds": 60.0, "window_seconds": 1800.0}
    assert planned.plan(step_seconds=None, elapsed_seconds=100, **kw) == (
        None, "anytime-valid: no planned end (the gate gave no step length)")
    p, why = planned.plan(step_seconds=900, elapsed_seconds=None, **kw)  # a length, never dropped unsaid
    assert p is None and "no start to count it from" in why
    p, why = planned.plan(step_seconds=300, elapsed_seconds=100, **kw)
    assert p is None and "under 10 slices" in why
    p, why = planned.plan(step_seconds=30, elapsed_seconds=100, **kw)  # shorter than one slice
    assert p is None and "under 10 slices" in why
    p, why = planned.plan(step_seconds=3600, elapsed_seconds=100, **kw)
    assert p is None and "past canary.window_seconds" in why
    p, why = planned.plan(step_seconds=900, elapsed_seconds=1900, **kw)
    assert p is None and "no longer holds its first slices" in why
    p, why = planned.plan(step_seconds=840, elapsed_seconds=600, **kw)
    assert p == planned.PlannedEnd(slices=14, reached=False) and "240 s to the end" in why
    p, _ = planned.plan(step_seconds=840, elapsed_seconds=839.5, **kw)  # clock jitter: the gate's last look
    assert p == planned.PlannedEnd(slices=14, reached=True)
    p, why = planned.plan(step_seconds=840, elapsed_seconds=1200, **kw)
    assert p is not None and p.reached and "past the end" in why
    assert planned.PlannedEnd(14, True).split(0.01) == pytest.approx((0.001, 0.005))


def test_the_final_tests_are_the_exact_binomial_at_design_effect_one() -> None:
    for bad_c, n_c, bad_b, n_b in ((12, 1000, 150, 19000), (0, 500, 40, 9500), (30, 1800, 342, 34200)):
        p0 = n_c / (n_c + n_b)
        worse = planned.final_ratio(bad_c, n_c, bad_b, n_b, deff=1.0, alpha=0.01)
        assert worse.p_value == pytest.approx(sps.binom.sf(bad_c - 1, bad_c + bad_b, p0), rel=1e-9, abs=1e-12)
        pr = p0 * 2 / (p0 * 2 + 1 - p0)
        better = planned.final_noninferior(bad_c, n_c, bad_b, n_b, effect_ratio=2.0, alpha=0.2, deff=1.0,
                                           base_rate=0.0)
        assert better.p_value == pytest.approx(sps.binom.cdf(bad_c, bad_c + bad_b, pr), rel=1e-9)
    # Below the base rate the canary alone is tested against effect_ratio × base_rate.
    alone = planned.final_noninferior(3, 1000, 0, 19000, effect_ratio=2.0, alpha=0.2, deff=1.0, base_rate=0.05)
    assert alone.p_value == pytest.approx(sps.binom.cdf(3, 1000, 0.1)) and alone.reject


def test_the_final_t_test_keeps_its_size_on_independent_and_on_correlated_slices() -> None:
    rng = np.random.default_rng(3)
    trials, k, alpha = 4000, 30, 0.05
    h = rng.uniform(0.5, 2.0, k)
    iid = sum(planned.final_t(rng.normal(0, 1, k) * np.sqrt(h), h, alpha=alpha).reject for _ in range(trials))
    assert 0.03 < iid / trials < 0.065
    # AR(1) slices (a pod busy for minutes): a t-test on single slices would reject several times too often;
    # the dependence blocks keep it near α.
    phi = 0.7
    naive = blocked = 0
    for _ in range(trials // 2):
        e = rng.normal(0, 1, k)
        x = np.empty(k)
        x[0] = e[0]
        for j in range(1, k):
            x[j] = phi * x[j - 1] + np.sqrt(1 - phi * phi) * e[j]
        blocked += planned.final_t(x, np.ones(k), alpha=alpha).reject
        t = x.mean() / (x.std(ddof=1) / np.sqrt(k))
        naive += sps.t.sf(t, k - 1) <= alpha
    # Blocks narrow the excess, they do not remove it (sequential.dependence_blocks).
    assert naive / (trials // 2) > 0.2
    assert blocked / (trials // 2) < min(0.13, 0.6 * naive / (trials // 2))


def test_the_slice_pass_bound_passes_a_canary_at_the_effect_at_most_its_share() -> None:
    # A canary exactly 2× worse (the effect) must pass at most 1 − power of the time. The final bound's t-test
    # on slices is near its level on binomial slices and liberal on overdispersed ones (right skew), which is
    # why it spends SLICES_PASS_SHARE of its share: at the level it is given, it stays under the whole share.
    rng = np.random.default_rng(2)
    share = 0.1
    level = share * planned.SLICES_PASS_SHARE

    def passes(*, overdispersed: bool, alpha: float, trials: int = 2000) -> float:
        hits = 0
        for _ in range(trials):
            n, m = rng.poisson(60, 30).astype(float), rng.poisson(1140, 30).astype(float)
            q = rng.gamma(1.0, 0.1, 30) if overdispersed else np.full(30, 0.1)
            x, y = rng.binomial(n.astype(int), np.clip(q, 0, 1)), rng.binomial(m.astype(int), 0.05)
            hits += planned.final_noninferior_slices(x, n, y, m, effect_ratio=2.0, alpha=alpha, base_rate=0.0).reject
        return hits / trials

    assert passes(overdispersed=False, alpha=share) < share + 0.02
    assert passes(overdispersed=True, alpha=share) > share + 0.02  # the reason for the margin
    assert passes(overdispersed=True, alpha=level) < share
    # A canary no worse than the baseline passes (a design effect in the thousands would leave counts no pass).
    n, m = np.full(30, 60.0), np.full(30, 1140.0)
    x, y = rng.binomial(60, 0.05, 30) * 400.0, rng.binomial(1140, 0.05, 30) * 400.0  # tokens of a request together
    assert planned.final_noninferior_slices(x, n * 400, y, m * 400, effect_ratio=2.0, alpha=level,
                                            base_rate=0.0).reject


def test_dependence_blocks_leave_independent_slices_alone_and_merge_correlated_ones() -> None:
    x = np.array([1.0, -1.0] * 10)
    assert sequential.dependence_blocks(x, np.ones(20))[2] == 1
    runs = np.repeat(np.array([2.0, -2.0, 1.0, -1.0, 3.0]), 4)
    xs, hs, b = sequential.dependence_blocks(runs, np.ones(20))
    assert b > 1 and xs.sum() == pytest.approx(runs.sum()) and hs.sum() == pytest.approx(20.0)


def _slices(rng: np.random.Generator, slices: int, *, rate_c: float, rate_b: float = 0.01, n_c: int = 300,
            n_b: int = 900) -> list[tuple[ArmData, ArmData]]:
    out = []
    for _ in range(slices):
        nc, nb = int(rng.poisson(n_c)), int(rng.poisson(n_b))
        ec, eb = int(rng.binomial(nc, rate_c)), int(rng.binomial(nb, rate_b))
        out.append((ArmData(requests={"stop": float(nc - ec), "error": float(ec)}),
                    ArmData(requests={"stop": float(nb - eb), "error": float(eb)})))
    return out


def _window(pairs: Sequence[tuple[ArmData, ArmData]]) -> tuple[ArmData, ArmData]:
    def whole(arms: Sequence[ArmData]) -> ArmData:
        req: dict[str, float] = {}
        for a in arms:
            for k, v in (a.requests or {}).items():
                req[k] = req.get(k, 0.0) + v
        return ArmData(requests=req, slices=tuple(arms))
    return whole([c for c, _ in pairs]), whole([b for _, b in pairs])


def _first_fail(pairs: list[tuple[ArmData, ArmData]], *, stop: int, k: int | None, alpha: float) -> int | None:
    for look in range(1, stop + 1):
        c, b = _window(pairs[:look])
        plan = None if k is None else planned.PlannedEnd(slices=k, reached=look >= k)
        if judge_metric(ERRORS, c, b, alpha=alpha, power=0.8, plan=plan).outcome is Outcome.FAIL:
            return look
    return None


def test_the_error_budget_holds_with_steps_stopped_early_or_run_on_at_random() -> None:
    # α 0.1 so a rate is measurable in a unit test; a planned end at 15 slices, looks every slice, each step
    # stopped at random between 5 and 30 slices (a promotion by hand, an extended pause).
    rng = np.random.default_rng(11)
    alpha, trials, fails = 0.1, 150, 0
    for _ in range(trials):
        stop = int(rng.integers(5, 31))
        fails += _first_fail(_slices(rng, stop, rate_c=0.01), stop=stop, k=15, alpha=alpha) is not None
    # The binomial's upper 99.9% point at α·trials: a budget spent twice would overshoot it.
    assert fails <= sps.binom.ppf(0.999, trials, alpha), fails


def test_a_planned_end_fails_a_moderate_regression_the_anytime_test_misses_and_a_gross_one_early() -> None:
    rng = np.random.default_rng(5)
    moderate = [_slices(rng, 15, rate_c=0.016) for _ in range(20)]
    planned_fails = sum(_first_fail(p, stop=15, k=15, alpha=0.01) is not None for p in moderate)
    anytime_fails = sum(_first_fail(p, stop=15, k=None, alpha=0.01) is not None for p in moderate)
    assert planned_fails >= anytime_fails + 5, (planned_fails, anytime_fails)  # 13 against 5 with this seed
    gross = _slices(rng, 15, rate_c=0.08)
    first = _first_fail(gross, stop=15, k=15, alpha=0.01)
    assert first is not None and first < 15  # the interim share still fails it before the end


CONFIG = PAIR_FLEET + """canary:
  window_seconds: 1800
"""


def hour() -> StreamSource:
    """An hour of streams, so a step can start late in it."""
    return StreamSource(seconds=3600)


async def test_a_gate_without_since_starts_its_step_at_its_first_ask() -> None:
    clock = [1000.0]
    source = hour()
    service = CanaryService(parse_config(CONFIG, environ={}), source, clock=lambda: clock[0])
    first = await service.verdict_for("canary", "stable", since=None, weight="25", step_seconds=840)
    assert source.calls[-1][1] == 1000.0 and "planned end at 14 slices" in first.looks
    for _ in range(14):  # Argo asks every interval; the 15th measurement is the step's last
        clock[0] += 60.0
        last = await service.verdict_for("canary", "stable", since=None, weight="25", step_seconds=840)
    assert clock[0] == 1840.0 and source.calls[-1][1] == 1000.0 and "final look" in last.looks
    assert last.verdict is Outcome.PASS
    # The periodic job (the Prometheus twin's gauge) judges the same step.
    source.calls.clear()
    await service.run_once()
    assert {s for _, s, _ in source.calls} == {1000.0}
    # The next step (another weight) starts again; so does the same step after the gate went quiet.
    await service.verdict_for("canary", "stable", since=None, weight="50", step_seconds=840)
    assert source.calls[-1][1] == 1840.0
    clock[0] += STEP_FORGET_SECONDS + 1
    await service.verdict_for("canary", "stable", since=None, weight="50", step_seconds=840)
    assert source.calls[-1][1] == clock[0]
    # No step length: the anytime-valid tests, named.
    plain = await service.verdict_for("canary", "stable", since=None, weight="50")
    assert plain.looks.startswith("anytime-valid: no planned end")


def test_the_verdict_api_takes_and_reports_the_step() -> None:
    service = CanaryService(parse_config(CONFIG, environ={}), hour(), clock=lambda: 1800.0)
    app = FastAPI()
    app.include_router(canary_api.router(service))
    http = TestClient(app)
    body = http.get("/api/v1/canary/verdict", params={"since": 900, "step_seconds": 840}).json()
    assert body["looks"].startswith("planned end at 14 slices (final look")
    assert http.get("/api/v1/canary/verdict", params={"step_seconds": -5}).status_code == 422
    body = http.get("/api/v1/canary/verdict", params={"since": 1700, "step_seconds": 120}).json()
    assert "under 10 slices" in body["looks"]


def test_flagger_metadata_step_seconds_is_checked() -> None:
    ok = b'{"name":"llm","namespace":"serving","metadata":{"step_seconds":"600"}}'
    assert parse_payload(ok)[2]["step_seconds"] == "600"
    with pytest.raises(BadPayload, match="step_seconds"):
        parse_payload(b'{"name":"llm","namespace":"serving","metadata":{"step_seconds":"ten"}}')
