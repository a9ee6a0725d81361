"""Pods as units (observer/analyse/canary/pods.py): the pass test's promise on pod values, the pod values
themselves, when pods cannot be units, and the judge reading per-pod data at a step's planned end."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from observer.analyse.canary import pods
from observer.analyse.canary.judge import ArmData, Outcome
from observer.analyse.canary.verdict import judge
from observer.config.canary import CanarySpec
from tests.support.canary_streams import TTFT_EDGES, any_step, to_histogram


def _pod(counts_per_slice: list[list[float]]) -> ArmData:
    """A pod's window: one TTFT histogram per slice from non-cumulative bucket counts."""
    slices = tuple(ArmData(histograms={"ttft": to_histogram(np.asarray(c, dtype=float), TTFT_EDGES)})
                   for c in counts_per_slice)
    return ArmData(slices=slices)


def _counts(rng: np.random.Generator, probs: np.ndarray, n: int, slices: int) -> list[list[float]]:
    return [rng.multinomial(n, probs).astype(float).tolist() for _ in range(slices)]


BUCKETS = len(TTFT_EDGES) + 1
PROBS = np.full(BUCKETS, 1.0 / BUCKETS)


def test_a_canary_shifted_by_the_margin_passes_at_most_alpha() -> None:
    # Pod values as fleets give them over 30 min (sd 0.012 on `pod_queues`, 0.021 on `production`): 1 canary, 19 stable.
    rng = np.random.default_rng(7)
    margin, alpha, trials = 0.06, 0.05, 4000
    at_margin = sum(pods.shift_test(rng.normal(margin, 0.015, 1), rng.normal(0.0, 0.015, 19), margin=margin,
                                    alpha=alpha).accept for _ in range(trials)) / trials
    healthy = sum(pods.shift_test(rng.normal(0.0, 0.015, 1), rng.normal(0.0, 0.015, 19), margin=margin,
                                  alpha=alpha).accept for _ in range(trials)) / trials
    assert at_margin <= alpha + 3 * (alpha * (1 - alpha) / trials) ** 0.5
    assert healthy >= 0.9


def test_pods_are_compared_at_equal_load_where_load_moves_their_latency() -> None:
    # Sessions stick to pods: a pod's v follows the log of its requests (slope 0.08), luck sd 0.01 about it.
    rng = np.random.default_rng(9)
    margin, alpha, trials = 0.06, 0.05, 3000
    passed = {"healthy": 0, "at_margin": 0, "healthy_unadjusted": 0}
    for _ in range(trials):
        xs, xc = rng.normal(7.0, 0.4, 19), rng.normal(7.0, 0.4, 1)
        vs = 0.08 * (xs - 7.0) + rng.normal(0.0, 0.01, 19)
        luck = 0.08 * (xc - 7.0) + rng.normal(0.0, 0.01, 1)
        passed["healthy"] += pods.shift_test(luck, vs, margin=margin, alpha=alpha, loads=(xc, xs)).accept
        passed["at_margin"] += pods.shift_test(luck + margin, vs, margin=margin, alpha=alpha, loads=(xc, xs)).accept
        passed["healthy_unadjusted"] += pods.shift_test(luck, vs, margin=margin, alpha=alpha).accept
    assert passed["at_margin"] / trials <= alpha + 3 * (alpha * (1 - alpha) / trials) ** 0.5
    assert passed["healthy"] / trials >= 0.95
    assert passed["healthy_unadjusted"] / trials < 0.6  # the load's spread (0.032) hides a margin of 0.06
    got = pods.shift_test([0.0], vs, margin=margin, alpha=alpha, loads=(np.array([7.0]), xs))
    assert got.load_slope is not None and "at equal load (slope +0.0" in got.describe(margin)


def test_pod_values_are_zero_for_pods_alike_and_positive_for_a_slower_one() -> None:
    rng = np.random.default_rng(3)
    stable = {f"s{i}": _pod(_counts(rng, PROBS, 200, 10)) for i in range(8)}
    slow = np.zeros(BUCKETS)
    slow[-3:] = 1.0 / 3
    canary = {"c0": _pod(_counts(rng, slow, 200, 10)), "c1": _pod(_counts(rng, PROBS, 200, 10))}
    v = pods.pod_values(canary, stable, "ttft", TTFT_EDGES, slices=10)
    vc, vs = v.canary, v.stable
    assert v.left_out == 0 and np.all(v.stable_load == 2000)
    assert np.all(np.abs(vs) < 0.02)  # each stable pod against the other seven
    assert vc[0] > 0.35 and abs(vc[1]) < 0.02


def test_pods_cannot_be_units_without_a_stable_spread_or_a_canary_pod() -> None:
    rng = np.random.default_rng(4)
    four = {f"s{i}": _pod(_counts(rng, PROBS, 50, 10)) for i in range(4)}
    canary = {"c0": _pod(_counts(rng, PROBS, 50, 10))}
    got, why = pods.pod_shift(canary, four, "ttft", TTFT_EDGES, slices=10, margin=0.06, alpha=0.05)
    assert got is None and why.startswith("4 stable pods") and "under 5" in why
    late = {"c-new": _pod([[0.0] * BUCKETS] * 9 + [[2.0] * 10 + [0.0] * (BUCKETS - 10)])}  # 20 observations
    five = {**four, "s4": _pod(_counts(rng, PROBS, 50, 10))}
    got, why = pods.pod_shift(late, five, "ttft", TTFT_EDGES, slices=10, margin=0.06, alpha=0.05)
    assert got is None and why == f"no canary pod with {pods.MIN_POD_OBSERVATIONS} ttft observations"


def test_a_canary_pod_that_restarted_under_a_new_name_is_left_out_and_counted() -> None:
    rng = np.random.default_rng(5)
    stable = {f"s{i}": _pod(_counts(rng, PROBS, 50, 10)) for i in range(6)}
    old = _pod([*_counts(rng, PROBS, 50, 9), [0.0] * BUCKETS])
    new = _pod([[0.0] * BUCKETS] * 9 + [[1.0] * 10 + [0.0] * (BUCKETS - 10)])
    got, _ = pods.pod_shift({"c-old": old, "c-new": new}, stable, "ttft", TTFT_EDGES, slices=10, margin=0.06,
                            alpha=0.05)
    assert got is not None and got.canary_pods == 1 and got.left_out == 1
    assert "1 pods with under 30 observations left out" in got.describe(0.06)


@pytest.fixture(scope="module")
def step():  # type: ignore[no-untyped-def]
    return any_step(seed=11, model="production", seconds=900, total_rps=20.0, weight=0.05, by_pod=True)


def _ttft_detail(step, t: int, *, stable_pods: int | None = None) -> str:  # type: ignore[no-untyped-def]
    c = step.canary.window(0, t, pods="canary")
    b = step.baseline.window(0, t, pods="stable")
    if stable_pods is not None:
        b = replace(b, pods=dict(list(b.pods.items())[:stable_pods]))
    v = judge(CanarySpec(), canary="canary", baseline="stable", canary_data=c, baseline_data=b,
              expected_share=0.05, now=float(t), step_seconds=900, elapsed_seconds=float(t))
    ttft = next(r for r in v.metrics if r.name == "ttft")
    assert ttft.outcome is not Outcome.NODATA
    return ttft.detail


def test_the_judge_reads_pods_at_the_planned_end_only(step) -> None:  # type: ignore[no-untyped-def]
    assert "pods as units: 1 canary against 19 stable pods" in _ttft_detail(step, 900)
    assert "pods" not in _ttft_detail(step, 600)  # before the end: the anytime tests alone


def test_a_stable_pool_too_small_is_named_and_the_pooled_tests_decide(step) -> None:  # type: ignore[no-untyped-def]
    assert "pods not units: 3 stable pods with 30 ttft observations, under 5" in _ttft_detail(step, 900,
                                                                                            stable_pods=3)


def test_the_bench_runs_to_its_json_line() -> None:
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "bench.canary_pods", "--steps", "1", "--models", "pod_queues",
                          "--workers", "1"], capture_output=True, text=True, timeout=300, check=True).stdout
    last = json.loads(out.strip().splitlines()[-1])
    assert {"healthy_pass_within_step_by_model", "ttft_1.5x_passed_within_step", "aa_false_fail_by_model",
            "pod_spread_by_model"} <= set(last)
    assert set(last["healthy_pass_within_step_by_model"]["pod_queues"]) == {
        f"{w}pct@margin{m}" for w in (5, 25) for m in ("0.1", "0.06")}
