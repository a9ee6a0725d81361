"""The drift gate's test (observer.analyse.drift.arms) on seeded session-clustered data: calibrated where a
two-sample test permuting single samples is not, powerful on a shift, silent without enough slices."""

from __future__ import annotations

import numpy as np
import pytest

from observer.analyse.drift.arms import MIN_SLICES, arms_test
from observer.analyse.drift.mmd import permutation_test

D, TOPICS, SLICES = 16, 12, 30


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _window(rng: np.random.Generator, centres: np.ndarray, *, shift: float = 0.0, far: np.ndarray | None = None
            ) -> tuple[np.ndarray, list[int], np.ndarray, list[int]]:
    """Sessions of 4 turns on one topic inside one slice; the canary gets 10% of them; with `shift`, that
    share of the canary's turns come from the `far` topic."""
    b, bs, c, cs = [], [], [], []
    for _ in range(300):
        topic, at = centres[rng.integers(TOPICS)], int(rng.integers(SLICES))
        turns = topic + 0.35 * rng.standard_normal((4, D))
        canary = rng.random() < 0.1
        if canary and far is not None:
            moved = rng.random(4) < shift
            turns[moved] = far + 0.35 * rng.standard_normal((int(moved.sum()), D))
        (c if canary else b).extend(turns)
        (cs if canary else bs).extend([at] * 4)
    return _unit(np.array(b)), bs, _unit(np.array(c)), cs


def test_identical_arms_stay_at_alpha_where_single_sample_permutation_does_not() -> None:
    rng = np.random.default_rng(3)
    gate = naive = 0
    trials = 200
    for i in range(trials):
        centres = rng.standard_normal((TOPICS, D)) * 1.5
        b, bs, c, cs = _window(rng, centres)
        r = arms_test(b, bs, c, cs, flips=499, seed=i)
        gate += r is not None and r.p_value < 0.05
        naive += permutation_test(b, c, permutations=199, alpha=0.05, seed=i).drift
    assert gate / trials <= 0.08, gate  # 0.05 nominal; 0.08 allows the binomial noise of 200 trials
    assert naive / trials >= 0.3, naive  # the dependence the gate is built for


def test_a_shifted_canary_is_found() -> None:
    rng = np.random.default_rng(4)
    hits = 0
    for i in range(40):
        centres = rng.standard_normal((TOPICS, D)) * 1.5
        far = rng.standard_normal(D) * 3.0
        b, bs, c, cs = _window(rng, centres, shift=0.3, far=far)
        r = arms_test(b, bs, c, cs, flips=499, seed=i)
        hits += r is not None and r.p_value < 0.05
    assert hits >= 32, hits


def test_too_few_shared_slices_is_no_test_and_bad_shapes_are_refused() -> None:
    rng = np.random.default_rng(5)
    x = _unit(rng.standard_normal((40, D)))
    slices = [i % (MIN_SLICES - 1) for i in range(40)]
    assert arms_test(x, slices, x, slices) is None
    with pytest.raises(ValueError, match="one slice id per row"):
        arms_test(x, slices[:-1], x, slices)
