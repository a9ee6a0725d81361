"""Canary statistics: exact conditional ratio test, sequential validity, sample sizes, quantile ratios."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps

from observer.analyse.canary import stats
from observer.collect.model import Histogram
from tests.support.canary_streams import TTFT_EDGES, ArmProfile, to_histogram


def test_zero_baseline_errors_and_unequal_split() -> None:
    t = stats.ratio_test(12, 100, 0, 1900, alpha=0.01)
    assert t.reject and t.ratio is None and t.rate_baseline == 0.0
    quiet = stats.ratio_test(0, 100, 0, 1900, alpha=0.01)
    assert not quiet.reject and quiet.p_value == 1.0
    # 2 errors in 100 canary requests vs 0 in 1900 is not enough evidence at a 5% split.
    assert not stats.ratio_test(2, 100, 0, 1900, alpha=0.01).reject


def test_better_canary_never_fails() -> None:
    t = stats.ratio_test(1, 1000, 200, 1000, alpha=0.05)
    assert not t.reject and t.p_value == 1.0


@pytest.mark.parametrize("args", [(-1, 10, 0, 10), (11, 10, 0, 10), (0, 10, 5, 4)],
                         ids=["negative", "bad-above-n-canary", "bad-above-n-baseline"])
def test_ratio_test_rejects_impossible_counts(args: tuple[int, int, int, int]) -> None:
    with pytest.raises(ValueError):
        stats.ratio_test(*args, alpha=0.05)


def test_repeated_looks_keep_alpha_while_naive_testing_inflates() -> None:
    """Under H0 (same 1% rate, 10% split), 40 looks: the mixture test stays below α, a fixed test does not."""
    rng = np.random.default_rng(7)
    runs, looks, per_look, alpha = 600, 40, 400, 0.05
    seq_fail = naive_fail = 0
    for _ in range(runs):
        n = rng.binomial(per_look, 0.1, size=looks)
        nb = per_look - n
        ec, eb = rng.binomial(n, 0.01), rng.binomial(nb, 0.01)
        cn, cnb, cec, ceb = np.cumsum(n), np.cumsum(nb), np.cumsum(ec), np.cumsum(eb)
        seq = naive = False
        for k in range(looks):
            t = stats.ratio_test(int(cec[k]), int(cn[k]), int(ceb[k]), int(cnb[k]), alpha=alpha)
            seq = seq or t.reject
            naive = naive or (t.p_fixed < alpha and cec[k] + ceb[k] > 0)
        seq_fail += seq
        naive_fail += naive
    assert seq_fail / runs <= alpha
    assert naive_fail / runs > seq_fail / runs


def test_detects_error_doubling_at_25_percent() -> None:
    rng = np.random.default_rng(3)
    n_c, n_b = 8000, 24000
    t = stats.ratio_test(int(rng.binomial(n_c, 0.02)), n_c, int(rng.binomial(n_b, 0.01)), n_b, alpha=0.01)
    assert t.reject and t.ratio is not None and 1.5 < t.ratio < 2.6


def test_sample_sizes_match_the_textbook() -> None:
    # REFERENCE: one-sided α 0.05, power 0.8, per arm: 1% → 2% ≈ 1,800; 90% → 85% pass ≈ 540.
    assert 1750 <= stats.ratio_sample_size(base_rate=0.01, effect_ratio=2.0, alpha=0.05, power=0.8) <= 1900
    assert 520 <= stats.ratio_sample_size(base_rate=0.10, effect_ratio=1.5, alpha=0.05, power=0.8) <= 560
    equal = stats.ratio_sample_size(base_rate=0.01, effect_ratio=2.0, alpha=0.05, power=0.8)
    five_pct = stats.ratio_sample_size(base_rate=0.01, effect_ratio=2.0, alpha=0.05, power=0.8, allocation=19)
    assert five_pct < equal  # a big baseline arm means fewer canary requests are needed
    assert stats.noninferiority_sample_size(pass_rate=0.9, margin=0.05, alpha=0.05, power=0.8) > 400


def test_difference_sequence_covers_under_repeated_looks() -> None:
    rng = np.random.default_rng(11)
    runs, misses = 400, 0
    for _ in range(runs):
        xc = rng.binomial(1, 0.9, size=300)
        xb = rng.binomial(1, 0.9, size=300)
        for k in range(20, 301, 20):
            ci = stats.difference_sequence(int(xc[:k].sum()), k, int(xb[:k].sum()), k, alpha=0.05, tau=0.05)
            if not ci.low <= 0.0 <= ci.high:
                misses += 1
                break
    assert misses / runs <= 0.05


def test_difference_sequence_full_pass_counts_keep_width() -> None:
    ci = stats.difference_sequence(50, 50, 50, 50, alpha=0.05, tau=0.05)
    assert ci.low < 0 < ci.high
    with pytest.raises(ValueError):
        stats.difference_sequence(0, 0, 1, 1, alpha=0.05, tau=0.05)


def _hist(scale: float, n: int, seed: int) -> Histogram:
    p = ArmProfile().bucket_probs(TTFT_EDGES, 0.3 * scale, 0.5)
    return to_histogram(np.random.default_rng(seed).multinomial(n, p), TTFT_EDGES)


def test_quantile_ratio_interval() -> None:
    same = stats.quantile_ratio(_hist(1.0, 20000, 1), _hist(1.0, 20000, 2), 0.95, alpha=0.01)
    assert same is not None and same.low <= 1.0 <= same.high
    slow = stats.quantile_ratio(_hist(1.5, 20000, 3), _hist(1.0, 20000, 4), 0.95, alpha=0.01)
    assert slow is not None and slow.low > 1.0 and slow.estimate > 1.2
    assert stats.quantile_ratio(_hist(1.0, 0, 5), _hist(1.0, 100, 6), 0.95, alpha=0.01) is None


def test_auto_edge_is_at_or_above_the_baseline_quantile() -> None:
    h = _hist(1.0, 5000, 9)
    le = stats.auto_edge(h, 0.95)
    assert le is not None
    above, total = stats.histogram.fraction_above(h, le)
    assert above / total <= 0.05
    true_p95 = 0.3 * np.exp(0.5 * sps.norm.ppf(0.95))
    assert float(le) >= true_p95 * 0.9


@pytest.mark.parametrize(("n_c", "n_b", "ok"), [(50, 950, True), (500, 500, False), (5, 45, True)],
                         ids=["as-expected", "half-instead-of-5pct", "too-few-to-tell"])
def test_split_check(n_c: int, n_b: int, ok: bool) -> None:
    assert stats.split_check(n_c, n_b, expected=0.05, tolerance=0.5, min_requests=200)[0] is ok
