"""Histogram maths with PromQL semantics: quantiles, deltas between scrapes, merges."""

from __future__ import annotations

from collections.abc import Iterable

from observer.collect.model import Histogram


def quantile(q: float, h: Histogram) -> float:
    """PromQL `histogram_quantile(q, …)` on `h`: NaN when empty; linear inside a bucket; the lowest
    bucket starts at 0 (when its bound is positive); a rank in +Inf returns the highest finite bound."""
    raise NotImplementedError


def delta(new: Histogram, old: Histogram | None) -> Histogram:
    """Increase from `old` to `new`, like Prometheus `increase()`: a counter that went down (pod restart)
    counts from zero. Bounds are matched by their `le` text; bounds only in `new` count from zero."""
    raise NotImplementedError


def merge(histograms: Iterable[Histogram]) -> Histogram | None:
    """Sum histograms bucket by bucket (same `le` text); None when there is nothing to merge."""
    raise NotImplementedError


def fraction_above(h: Histogram, threshold_le: str) -> tuple[float, float]:
    """(observations above the bucket edge whose `le` text is `threshold_le`, total observations)."""
    raise NotImplementedError
