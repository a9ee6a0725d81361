"""Histogram maths with PromQL semantics: quantiles, deltas between scrapes, merges; and `Hist`, the
observer's own accumulating histogram (proxy latencies, cold starts)."""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from observer.collect.model import Histogram
from observer.conventions import vllm


def quantile(q: float, h: Histogram) -> float:
    """PromQL `histogram_quantile(q, …)` on `h`: NaN when empty; linear inside a bucket; the lowest
    bucket starts at 0 (when its bound is positive); a rank in +Inf returns the highest finite bound."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bounds = (*h.bounds, math.inf)
    counts = list(h.cumulative)
    if len(bounds) < 2 or len(counts) != len(bounds):
        return math.nan
    # Prometheus' ensureMonotonic: a bucket may not hold fewer observations than the one below it.
    for i in range(1, len(counts)):
        if counts[i] < counts[i - 1]:
            counts[i] = counts[i - 1]
    observations = counts[-1]
    if observations == 0 or math.isnan(observations):
        return math.nan
    rank = q * observations
    b = next(i for i, c in enumerate(counts) if c >= rank)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[b], counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count == 0:
        return start
    return start + (end - start) * (rank / count)


def _by_le(h: Histogram) -> dict[str, float]:
    labels = h.le_labels or tuple(vllm.format_le(b) for b in h.bounds)
    out = dict(zip(labels, h.cumulative, strict=False))
    out["+Inf"] = h.cumulative[-1]
    return out


def _rebuild(template: Histogram, values: dict[str, float], total_sum: float, count: float) -> Histogram:
    labels = template.le_labels or tuple(vllm.format_le(b) for b in template.bounds)
    return Histogram(bounds=template.bounds, cumulative=(*(values[le] for le in labels), values["+Inf"]),
                     sum=total_sum, count=count, le_labels=labels)


def is_reset(new: Histogram, old: Histogram) -> bool:
    """True when `new` cannot follow `old` without a counter reset (pod restart)."""
    if new.count < old.count:
        return True
    old_le = _by_le(old)
    return any(v < old_le[le] for le, v in _by_le(new).items() if le in old_le)


def delta(new: Histogram, old: Histogram | None) -> Histogram:
    """Increase from `old` to `new`, like Prometheus `increase()`: a counter that went down (pod restart)
    counts from zero. Bounds are matched by their `le` text; bounds only in `new` count from zero."""
    if old is None or is_reset(new, old):
        return new
    old_le = _by_le(old)
    values = {le: v - old_le.get(le, 0.0) for le, v in _by_le(new).items()}
    return _rebuild(new, values, new.sum - old.sum, new.count - old.count)


def merge(histograms: Iterable[Histogram]) -> Histogram | None:
    """Sum histograms bucket by bucket (same `le` text); None when there is nothing to merge.

    Only the edges every histogram has are kept: summing a cumulative count that some inputs lack
    would understate that bucket (what `sum by (le)` silently does in PromQL with mixed edges)."""
    items = list(histograms)
    if not items:
        return None
    if len(items) == 1:
        return items[0]
    maps = [_by_le(h) for h in items]
    common = set(maps[0]).intersection(*maps[1:])
    template = max(items, key=lambda h: len(h.bounds))
    labels = template.le_labels or tuple(vllm.format_le(b) for b in template.bounds)
    keep = [(b, le) for b, le in zip(template.bounds, labels, strict=False) if le in common]
    values = {le: sum(m[le] for m in maps) for _, le in keep}
    values["+Inf"] = sum(m["+Inf"] for m in maps)
    return Histogram(bounds=tuple(b for b, _ in keep), cumulative=(*(values[le] for _, le in keep), values["+Inf"]),
                     sum=sum(h.sum for h in items), count=sum(h.count for h in items),
                     le_labels=tuple(le for _, le in keep))


def fraction_above(h: Histogram, threshold_le: str) -> tuple[float, float]:
    """(observations above the bucket edge whose `le` text is `threshold_le`, total observations)."""
    by_le = _by_le(h)
    if threshold_le not in by_le:
        try:
            wanted = float(threshold_le)
        except ValueError:
            raise KeyError(f"no bucket edge le={threshold_le!r}") from None
        match = [le for le, b in zip(h.le_labels, h.bounds, strict=False) if b == wanted]
        if not match:
            raise KeyError(f"no bucket edge le={threshold_le!r}; edges: {', '.join(h.le_labels)}")
        threshold_le = match[0]
    total = by_le["+Inf"]
    return total - by_le[threshold_le], total


@dataclass
class Hist:
    """A cumulative-on-export histogram the observer fills itself: per-bucket counts (a value lands in the
    first bucket whose edge is ≥ it), sum and count."""

    edges: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        self.counts = [0] * (len(self.edges) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.edges, value)] += 1
        self.total += value

    def buckets(self) -> list[tuple[str, float]]:
        out, running = [], 0
        for edge, n in zip((*self.edges, float("inf")), self.counts, strict=True):
            running += n
            out.append(("+Inf" if edge == float("inf") else repr(edge), float(running)))
        return out
