"""One slow replica among its siblings (issue 18 item 2): the robust outlier test, seeded trials of its
false-alarm rate on dependent (bursty, queueing) per-replica traffic, and its power on a 3× slower GPU."""

from __future__ import annotations

import numpy as np
import pytest

from observer.analyse.replicas import OutlierRule, ReplicaStat, ReplicaTracker, judge, robust_scores
from tests.support.pod_traffic import hist, pod_traffic, trial


def test_robust_scores_floor_the_mad() -> None:
    same = robust_scores({"a": 1.0, "b": 1.0, "c": 1.0, "d": 3.0}, mad_floor=0.05)
    assert same["a"] == 0.0 and same["d"] == pytest.approx(2.0 / (1.4826 * 0.05))
    assert robust_scores({"a": 0.0, "b": 0.0}, mad_floor=0.05) == {"a": 0.0, "b": 0.0}  # no division by 0


def test_judge_needs_siblings_requests_and_a_real_ratio() -> None:
    rule = OutlierRule()
    three = [ReplicaStat("a", 0.3, 100, 0.10), ReplicaStat("b", 0.3, 100, 0.11), ReplicaStat("c", 0.9, 100, 0.33)]
    got = {s.replica: s for s in judge(three, rule)}
    assert got["c"].outlier and not got["a"].outlier and got["c"].share == pytest.approx(1 / 3)
    assert not any(s.outlier for s in judge(three[1:], rule))  # two replicas: undecidable, no claim
    assert all(s.score is None for s in judge(three[1:], rule))
    few = [ReplicaStat("a", 0.3, 100, 0.10), ReplicaStat("b", 0.3, 100, 0.11), ReplicaStat("c", 0.9, 5, 0.33)]
    assert not any(s.outlier for s in judge(few, rule))  # 5 requests: too few to call it slow
    # Far in z but only 1.3× the median: a tight fleet's small wobble is not paged on.
    tight = [ReplicaStat("a", 0.3, 100, 0.100), ReplicaStat("b", 0.3, 100, 0.100), ReplicaStat("c", 0.4, 100, 0.130)]
    assert not any(s.outlier for s in judge(tight, rule))
    idle = [ReplicaStat("a", None, 0.0)]
    assert judge(idle, rule)[0].share is None


def test_false_alarms_and_power_over_seeded_trials_on_dependent_traffic() -> None:
    rng = np.random.default_rng(18)
    trials = 300
    false_alarm = sum(not trial(rng, 6, None) for _ in range(trials)) / trials
    power = sum(trial(rng, 6, 2) for _ in range(trials)) / trials
    power4 = sum(trial(rng, 4, 1) for _ in range(trials)) / trials
    assert false_alarm <= 0.02, false_alarm
    assert power >= 0.95 and power4 >= 0.9, (power, power4)


def test_tracker_forgets_departed_replicas_and_reports_idle_ones() -> None:
    rng = np.random.default_rng(1)
    tracker = ReplicaTracker(window_seconds=60.0)
    h = hist(pod_traffic(rng, 100, 1.0))
    tracker.observe({"a": hist(np.zeros(0)), "b": hist(np.zeros(0))}, 0.0)
    tracker.observe({"a": h, "b": hist(np.zeros(0))}, 30.0)
    stats = {s.replica: s for s in tracker.window(30.0)}
    assert stats["a"].requests == 100 and stats["b"].requests == 0 and stats["b"].ttft_p95 is None
    tracker.observe({"a": h}, 45.0)
    assert [s.replica for s in tracker.window(45.0)] == ["a"]


def test_tracker_reports_each_replicas_e2e_p95_next_to_its_ttft() -> None:
    rng = np.random.default_rng(2)
    tracker = ReplicaTracker(window_seconds=60.0)
    zero = hist(np.zeros(0))
    tracker.observe({"a": zero}, 0.0, e2e={"a": zero})
    tracker.observe({"a": hist(pod_traffic(rng, 200, 1.0))}, 30.0, e2e={"a": hist(np.full(200, 3.0))})
    [a] = tracker.window(30.0)
    assert a.e2e_p95 is not None and 2.5 < a.e2e_p95 <= 5.0 and a.ttft_p95 is not None and a.ttft_p95 < 1.0
