"""Per-target scrape history: reset-adjusted running totals and a bounded time-indexed history.

vLLM counters and histogram buckets restart from zero when a pod restarts. Like Prometheus `rate()`,
an increase between two scrapes is `new - old`, or `new` when the value went down. `TargetTotals`
folds every scrape of one target into running totals that only ever grow (the first scrape of a
target is its baseline, as a first sample is for `rate()`), so a window increase is a subtraction
of two snapshots, and a sum of these totals over a version's targets is itself monotonic — safe to
re-export as a Prometheus counter. `History` keeps snapshots over the window at full resolution and
thins older ones to one per `coarse_step_seconds` up to `retention_seconds`: memory is bounded by
configuration, never by uptime.
"""

from __future__ import annotations

import logging
import math
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from observer.analyse import histogram as hmath
from observer.collect.model import Histogram, ModelMetrics, VllmScrape

log = logging.getLogger("observer.window")

T = TypeVar("T")


def increase(new: float, old: float) -> float:
    """Counter increase between two samples; a decrease is a reset, counted from zero (Prometheus rate())."""
    return new - old if new >= old else new


def _increase_from(value: float, previous: float | None, *, known: bool) -> float:
    if previous is None:
        return value if known else 0.0  # new series on a known target started from zero; else a baseline
    if not math.isfinite(previous):
        return 0.0
    return increase(value, previous)


def zero_like(h: Histogram) -> Histogram:
    """An empty histogram with `h`'s bucket layout."""
    return Histogram(bounds=h.bounds, cumulative=(0.0,) * len(h.cumulative), sum=0.0, count=0.0,
                     le_labels=h.le_labels)


def add_same_layout(a: Histogram, b: Histogram) -> Histogram:
    """Bucket-wise sum of two histograms with the same `le` layout (caller checks)."""
    cumulative = tuple(x + y for x, y in zip(a.cumulative, b.cumulative, strict=True))
    return Histogram(bounds=a.bounds, cumulative=cumulative, sum=a.sum + b.sum, count=a.count + b.count,
                     le_labels=a.le_labels)


def _finite_histogram(h: Histogram) -> bool:
    # NaN and ±Inf survive a sum, so one C-level sum checks every bucket
    return math.isfinite(h.sum) and math.isfinite(h.count) and math.isfinite(sum(h.cumulative))


def layout(h: Histogram) -> tuple[str, ...] | tuple[float, ...]:
    """The key that decides whether two histograms can be added bucket by bucket."""
    return h.le_labels or h.bounds


@dataclass
class ModelTotals:
    """Reset-adjusted totals of one model on one target since the target's first scrape."""

    histograms: dict[str, Histogram] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    labelled: dict[str, dict[str, float]] = field(default_factory=dict)


class TargetTotals:
    """Folds successive scrapes of one vLLM target into monotonic totals per model."""

    def __init__(self, *, max_models: int = 8) -> None:
        self.max_models = max_models
        self.models: dict[str, ModelTotals] = {}
        self.models_dropped = 0
        self.resets = 0
        self._last: dict[str, ModelMetrics] = {}

    def observe(self, scrape: VllmScrape) -> None:
        """Add the increases since the previous scrape of this target (a restart counts once in `resets`)."""
        reset = False
        for name, now in scrape.models.items():
            before = self._last.get(name)
            totals = self.models.get(name)
            if totals is None:
                if len(self.models) >= self.max_models:
                    if not self.models_dropped:
                        log.warning("a target serves more than %d models; model %r and later ones are not counted",
                                    self.max_models, name)
                    self.models_dropped += 1
                    continue
                totals = self.models[name] = ModelTotals()
            reset = self._fold(totals, now, before) or reset
            self._last[name] = now
        if reset:
            self.resets += 1

    def _fold(self, totals: ModelTotals, now: ModelMetrics, before: ModelMetrics | None) -> bool:
        reset = False
        for fam, h in now.histograms.items():
            if not _finite_histogram(h):
                continue  # a NaN would poison the running total for good
            prev = None if before is None else before.histograms.get(fam)
            acc = totals.histograms.get(fam)
            if (prev is not None and acc is not None and layout(prev) == layout(h) == layout(acc)
                    and _finite_histogram(prev)):
                # The common case, fused: same buckets as the previous scrape and as the total.
                if h.count < prev.count or any(n < o for n, o in zip(h.cumulative, prev.cumulative, strict=True)):
                    reset = True
                    totals.histograms[fam] = add_same_layout(acc, h)
                else:
                    cumulative = tuple(a + n - o for a, n, o in zip(acc.cumulative, h.cumulative, prev.cumulative,
                                                                    strict=True))
                    totals.histograms[fam] = Histogram(bounds=acc.bounds, cumulative=cumulative,
                                                       sum=acc.sum + h.sum - prev.sum,
                                                       count=acc.count + h.count - prev.count, le_labels=acc.le_labels)
                continue
            if prev is not None and not _finite_histogram(prev):
                d = zero_like(h)  # no usable previous sample: a new baseline
            elif prev is None:
                # A baseline: nothing counted for a target (or family) seen for the first time,
                # except a family appearing on a target we already know (it started from zero).
                d = zero_like(h) if before is None else h
            else:
                reset = reset or hmath.is_reset(h, prev)
                d = hmath.delta(h, prev)
            if acc is None or layout(acc) != layout(d):
                if acc is not None:
                    log.info("bucket layout of %s changed; its running total restarts", fam)
                totals.histograms[fam] = d
            else:
                totals.histograms[fam] = add_same_layout(acc, d)
        for fam, v in now.counters.items():
            if not math.isfinite(v):
                continue
            prev_v = None if before is None else before.counters.get(fam)
            inc = _increase_from(v, prev_v, known=before is not None)
            totals.counters[fam] = totals.counters.get(fam, 0.0) + inc
        for fam, values in now.labelled_counters.items():
            prev_map = None if before is None else before.labelled_counters.get(fam)
            acc_map = totals.labelled.setdefault(fam, {})
            for label, v in values.items():
                if not math.isfinite(v):
                    continue
                prev_v = None if prev_map is None else prev_map.get(label)
                # A label value new on a known target (a first `abort`) started from zero.
                inc = _increase_from(v, prev_v, known=before is not None)
                acc_map[label] = acc_map.get(label, 0.0) + inc
        return reset


@dataclass(frozen=True)
class _Schema:
    """Where each family lives in a packed snapshot; shared by consecutive snapshots of the same shape."""

    histograms: tuple[tuple[str, tuple[float, ...], tuple[str, ...], int], ...]
    counters: tuple[tuple[str, int], ...]
    labelled: tuple[tuple[str, tuple[str, ...], int], ...]
    size: int


@dataclass(frozen=True)
class Totals:
    """A packed, immutable snapshot of summed running totals (8 bytes per number in an array)."""

    schema: _Schema
    values: array[float]

    @classmethod
    def pack(cls, histograms: Mapping[str, Histogram], counters: Mapping[str, float],
             labelled: Mapping[str, Mapping[str, float]], *, previous: Totals | None = None) -> Totals:
        """Pack totals; the schema object of `previous` is reused when the shape did not change."""
        hs, cs, ls = [], [], []
        values = array("d")
        for fam in sorted(histograms):
            h = histograms[fam]
            hs.append((fam, h.bounds, h.le_labels, len(values)))
            values.extend(h.cumulative)
            values.append(h.sum)
            values.append(h.count)
        for fam in sorted(counters):
            cs.append((fam, len(values)))
            values.append(counters[fam])
        for fam in sorted(labelled):
            keys = tuple(sorted(labelled[fam]))
            ls.append((fam, keys, len(values)))
            values.extend(labelled[fam][k] for k in keys)
        schema = _Schema(tuple(hs), tuple(cs), tuple(ls), len(values))
        if previous is not None and previous.schema == schema:
            schema = previous.schema
        return cls(schema, values)

    def histogram(self, family: str) -> Histogram | None:
        """The total of `family`, or None when absent."""
        for fam, bounds, les, off in self.schema.histograms:
            if fam == family:
                n = len(bounds) + 1
                cum = tuple(self.values[off:off + n])
                return Histogram(bounds=bounds, cumulative=cum, sum=self.values[off + n],
                                 count=self.values[off + n + 1], le_labels=les)
        return None

    def histogram_families(self) -> list[str]:
        """Names of the histogram families held."""
        return [h[0] for h in self.schema.histograms]

    def counter(self, family: str) -> float | None:
        """The total of counter `family`, or None when absent."""
        for fam, off in self.schema.counters:
            if fam == family:
                return float(self.values[off])
        return None

    def counters(self) -> dict[str, float]:
        """Every counter total."""
        return {fam: float(self.values[off]) for fam, off in self.schema.counters}

    def labelled(self, family: str) -> dict[str, float] | None:
        """The per-label totals of `family`, or None when absent."""
        for fam, keys, off in self.schema.labelled:
            if fam == family:
                return {k: float(self.values[off + i]) for i, k in enumerate(keys)}
        return None

    def labelled_families(self) -> list[str]:
        """Names of the labelled counter families held."""
        return [entry[0] for entry in self.schema.labelled]


def sum_totals(models: Iterable[ModelTotals]) -> tuple[dict[str, Histogram], dict[str, float],
                                                        dict[str, dict[str, float]]]:
    """Sum model totals; histograms of a family are added when their layout matches the first seen."""
    hists: dict[str, Histogram] = {}
    counters: dict[str, float] = {}
    labelled: dict[str, dict[str, float]] = {}
    for m in models:
        for fam, h in m.histograms.items():
            acc = hists.get(fam)
            if acc is None:
                hists[fam] = h
            elif layout(acc) == layout(h):
                hists[fam] = add_same_layout(acc, h)
            else:
                log.debug("histogram %s: bucket layouts differ between targets; one target left out", fam)
        for fam, v in m.counters.items():
            counters[fam] = counters.get(fam, 0.0) + v
        for fam, values in m.labelled.items():
            acc_map = labelled.setdefault(fam, {})
            for k, v in values.items():
                acc_map[k] = acc_map.get(k, 0.0) + v
    return hists, counters, labelled


class History(Generic[T]):
    """Time-indexed points: all of them within `fine_seconds`, then one per `coarse_step_seconds`
    up to `retention_seconds`; `max_points` caps the fine part whatever the scrape interval."""

    def __init__(self, *, fine_seconds: float, retention_seconds: float, coarse_step_seconds: float = 60.0,
                 max_points: int = 4096) -> None:
        self.fine_seconds = fine_seconds
        self.retention_seconds = max(retention_seconds, fine_seconds)
        self.coarse_step_seconds = coarse_step_seconds
        self._fine: deque[tuple[float, T]] = deque(maxlen=max_points)
        self._coarse: deque[tuple[float, T]] = deque(
            maxlen=max(1, int(self.retention_seconds / coarse_step_seconds) + 2))

    def __len__(self) -> int:
        return len(self._fine) + len(self._coarse)

    def append(self, ts: float, value: T) -> None:
        """Add a point (timestamps must not go backwards; an older one is dropped)."""
        if self._fine and ts < self._fine[-1][0]:
            return
        if self._fine and len(self._fine) == self._fine.maxlen:
            self._demote(self._fine[0])
        self._fine.append((ts, value))
        while self._fine and self._fine[0][0] < ts - self.fine_seconds and len(self._fine) > 1:
            self._demote(self._fine.popleft())
        while self._coarse and self._coarse[0][0] < ts - self.retention_seconds:
            self._coarse.popleft()

    def _demote(self, point: tuple[float, T]) -> None:
        if not self._coarse or point[0] - self._coarse[-1][0] >= self.coarse_step_seconds:
            self._coarse.append(point)

    def points(self) -> Iterator[tuple[float, T]]:
        """Every retained point, oldest first."""
        yield from self._coarse
        yield from self._fine

    def latest(self) -> tuple[float, T] | None:
        """The newest point."""
        return self._fine[-1] if self._fine else None

    def at(self, ts: float) -> tuple[float, T] | None:
        """The newest point at or before `ts`; the oldest point when all are newer; None when empty."""
        found = self.at_each([ts])
        return found[0] if found else None

    def at_each(self, stamps: Sequence[float]) -> list[tuple[float, T]]:
        """`at` for each of `stamps`, with one pass over the points; [] when empty."""
        pts = list(self.points())
        if not pts:
            return []
        times = [p[0] for p in pts]
        return [pts[max(bisect_right(times, t) - 1, 0)] for t in stamps]

    def since(self, ts: float) -> list[tuple[float, T]]:
        """Points with a timestamp at or after `ts`."""
        return [p for p in self.points() if p[0] >= ts]
