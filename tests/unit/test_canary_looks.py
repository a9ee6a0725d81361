"""A fail stands: the sliced tests are made as they stood at the end of every earlier slice, so one more slice
(and the dependence blocks re-measured on it) cannot take back a fail a gate has already acted on."""

from __future__ import annotations

import numpy as np
import pytest

from observer.analyse.canary import sequential, stats


def _ar1(rng: np.random.Generator, n: int, rho: float) -> np.ndarray:
    e = rng.standard_normal(n)
    out = np.zeros(n)
    for i in range(n):
        out[i] = (rho * out[i - 1] if i else 0.0) + e[i]
    return out


def test_every_look_is_the_one_look_test_made_at_the_end_of_each_slice() -> None:
    """The vectorised test equals the one-look test called on every prefix: the same reject, the same p-value,
    on correlated, shifted, unequal-sized and changed-mid-window slices."""
    rng = np.random.default_rng(3)
    for _ in range(300):
        k = int(rng.integers(0, 45))
        x = _ar1(rng, k, rng.uniform(0.0, 0.9)) + rng.uniform(-0.2, 1.5)
        if rng.random() < 0.2:
            x[k // 2:] += 2.0
        h = rng.uniform(0.2, 2.0, k)
        if k and rng.random() < 0.3:
            h[-1] *= 0.1  # the look's own slice, partly filled
        alpha = float(rng.choice([0.005, 0.05, 0.2]))
        every = [5, None, 3][int(rng.integers(0, 3))]
        got = sequential.t_sequence(x, alpha=alpha, restart_every=every, sizes=h)
        looks = [sequential.t_sequence(x[:j], alpha=alpha, restart_every=every, sizes=h[:j], earlier_looks=False)
                 for j in range(2, k + 1)]
        assert got[2] == any(r for _, _, r in looks)
        assert got[0] == pytest.approx(min([p for p, _, _ in looks], default=1.0), rel=1e-9)


def test_block_sizes_at_every_look_match_the_window_measure() -> None:
    rng = np.random.default_rng(5)
    for _ in range(100):
        k = int(rng.integers(1, 60))
        x, h = _ar1(rng, k, rng.uniform(0.0, 0.9)) + 0.5, rng.uniform(0.3, 2.0, k)
        splits = np.array([0, 5, 10, 20])
        every = sequential.look_block_sizes(x, h, splits)
        for row, split in zip(every, splits, strict=True):
            assert list(row) == [sequential.block_size(x[:j], h[:j], split=int(split)) for j in range(1, k + 1)]
    flat = np.full(12, 3.0)  # bad events exactly in proportion: residuals at rounding level read as no correlation
    expect = [sequential.block_size(flat[:j], np.ones(j)) for j in range(1, 13)]
    assert list(sequential.look_block_sizes(flat, np.ones(12), np.array([0]))[0]) == expect
    assert expect[-1] == sequential._blocks_of(np.array([0.0]), np.array([12.0]))[0]  # read as ρ̂ = 0


def test_a_fail_stands_when_more_slices_lengthen_the_blocks() -> None:
    """The game day's goodput flake: a large, steady excess fails at 7 slices (blocks of one); at 9 the blocks
    are measured (ρ one standard error high: three slices a block), three blocks cannot reject, and the
    look-by-look test read inconclusive between two fails."""
    rng = np.random.default_rng(0)  # about half the seeds: ρ̂ one standard error high, or a negative ρ̂ below it
    x = 10.0 + rng.normal(0.0, 0.3, 9)
    h = np.ones(9)
    at7 = sequential.t_sequence(x[:7], alpha=0.005, sizes=h[:7], earlier_looks=False)
    at9 = sequential.t_sequence(x, alpha=0.005, sizes=h, earlier_looks=False)
    assert at7[2] and not at9[2], "the premise: the one-look test takes the fail back"
    assert sequential.block_size(x, h) >= 3
    assert sequential.t_sequence(x, alpha=0.005, sizes=h)[2]
    # The rate test on slices built on it keeps the fail too.
    n = np.full(9, 200.0)
    bad_canary, bad_baseline = np.round(0.5 * n + x).astype(float), np.round(0.5 * n).astype(float)
    assert stats.slice_test(bad_canary, n, bad_baseline, n * 4, alpha=0.005).reject


def test_a_pooled_fail_stands_when_the_design_effect_grows() -> None:
    """The pooled test deflates counts by a design effect re-measured every look: a burst arriving after the
    fail raises it, and the counts the earlier look failed on are still a fail."""
    n, m = np.full(14, 1000.0), np.full(14, 4000.0)
    y = np.full(14, 20.0)
    x = np.full(14, 20.0)  # 4× the baseline's rate, steadily
    x[12:] = [0.0, 400.0]  # a quiet slice, then a burst: the design effect jumps
    first = stats.slice_test(x[:12], n[:12], y[:12], m[:12], alpha=0.01, pooled=True)
    assert first.reject
    late = stats.slice_test(x, n, y, m, alpha=0.01, pooled=True)
    assert late.design_effect is not None and first.design_effect is not None
    assert late.design_effect > 5 * first.design_effect
    assert late.reject


def test_a_pass_bound_is_read_on_the_data_as_it_stands() -> None:
    """The shift's pass side is not carried: a canary shown below the margin early and slower later is not
    passed on the early slices."""
    h = np.ones(20)
    early_fast = np.concatenate([np.full(10, -0.05), np.full(10, 0.4)]) + np.random.default_rng(2).normal(
        0, 0.01, 20)
    before = sequential.t_sequence(0.1 * h[:10] - early_fast[:10], alpha=0.2, restart_every=None, sizes=h[:10],
                                   earlier_looks=False)
    now = sequential.t_sequence(0.1 * h - early_fast, alpha=0.2, restart_every=None, sizes=h,
                                earlier_looks=False)
    assert before[2] and not now[2]


def test_a_long_window_is_looked_at_on_a_coarser_schedule_within_bounds() -> None:
    """More slices than MAX_LOOKS: earlier looks every 2nd (4th, …) slice, so the work stays bounded."""
    rng = np.random.default_rng(9)
    x = rng.normal(0.0, 1.0, 4 * sequential.MAX_LOOKS)
    p, _, reject = sequential.t_sequence(x, alpha=0.01, sizes=np.ones(x.size))
    assert not reject and 0.0 < p <= 1.0
