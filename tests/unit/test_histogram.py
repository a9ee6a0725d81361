"""PromQL histogram_quantile semantics, deltas with counter resets, merges, SLO-edge fractions."""

from __future__ import annotations

import math

import pytest

from observer.analyse.histogram import delta, fraction_above, is_reset, merge, quantile
from observer.collect.model import Histogram


def hist(bounds: list[float], cumulative: list[float], *, total: float = 0.0) -> Histogram:
    return Histogram(bounds=tuple(bounds), cumulative=tuple(cumulative), sum=total, count=cumulative[-1],
                     le_labels=tuple(str(b) for b in bounds))


H = hist([1.0, 2.0, 4.0], [10, 30, 40, 40])


@pytest.mark.parametrize("q,expected", [
    (0.0, 0.0), (0.1, 0.4), (0.25, 1.0), (0.5, 1.5), (0.75, 2.0), (0.9, 2.0 + 2 * (6 / 10)), (1.0, 4.0),
])
def test_linear_interpolation_within_buckets(q: float, expected: float) -> None:
    assert quantile(q, H) == pytest.approx(expected)


def test_rank_in_inf_bucket_returns_highest_finite_bound() -> None:
    assert quantile(0.99, hist([1.0, 2.0], [1, 2, 100])) == 2.0


def test_edge_cases() -> None:
    assert math.isnan(quantile(0.5, hist([1.0], [0, 0])))
    assert math.isnan(quantile(math.nan, H))
    assert quantile(-0.1, H) == -math.inf and quantile(1.1, H) == math.inf
    assert quantile(0.5, hist([-1.0, 1.0], [5, 10, 10])) == -1.0  # lowest bucket with bound <= 0
    assert quantile(0.5, hist([1.0, 2.0], [10, 5, 10])) == pytest.approx(0.5)  # made monotonic


def test_delta_and_counter_reset() -> None:
    later = hist([1.0, 2.0, 4.0], [15, 40, 55, 60])
    d = delta(later, H)
    assert d.cumulative == (5, 10, 15, 20) and d.count == 20
    restarted = hist([1.0, 2.0, 4.0], [1, 2, 2, 3])
    assert is_reset(restarted, later)
    assert delta(restarted, later) == restarted  # counts from zero, like rate()
    assert delta(later, None) == later


def test_merge_keeps_common_edges_only() -> None:
    a = hist([1.0, 2.0], [1, 2, 3])
    b = hist([1.0, 1.5, 2.0], [2, 3, 4, 5])
    m = merge([a, b])
    assert m is not None
    assert m.bounds == (1.0, 2.0) and m.cumulative == (3, 6, 8) and m.count == 8
    assert merge([]) is None


def test_fraction_above_requires_an_existing_edge() -> None:
    assert fraction_above(H, "2.0") == (10, 40)
    assert fraction_above(H, "2") == (10, 40)  # numeric match when the text differs
    with pytest.raises(KeyError, match="no bucket edge"):
        fraction_above(H, "3")
