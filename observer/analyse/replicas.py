"""One slow replica among healthy siblings: per-replica window TTFT and request share,
and a robust outlier test against the version's other replicas.

A version's latency is summed over its replicas, so one GPU running 3× slower in a version of eight
moves the version's p95 by little and no SLO burns; users routed to that pod wait. Per replica
(bounded by the version's targets, i.e. the pod cap) the window's TTFT p50 and p95 and request share
are computed from the replica's own reset-adjusted TTFT histogram, and each replica's **p50** is
compared with its siblings' by a robust z-score:

    z = (p50 - median) / (1.4826 · MAD),   MAD floored at `mad_floor` × median

(the floor keeps near-identical healthy replicas from turning a 5 % wobble into z = 50).

The median, not the p95: a degraded GPU (throttled, a bad node) slows every request it serves, while
the tail of a healthy pod moves with its own bursts, queueing and stalls — on that dependent traffic a
p95 comparison flagged a healthy pod in 52% of the seeded trials (tests/unit/test_replica_outliers),
the median in 0.7%. The price: the median moves once most of the window is slow. A replica is an
outlier when z ≥ `z` **and** its p50 is at least `min_ratio` × the siblings' median **and** it served at least
`min_requests` in the window, in a version with at least `min_replicas` replicas that each served that
many (with two, which of them is "the odd one" is undecidable: the version-level SLO is the signal).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from observer.analyse import histogram as hmath
from observer.analyse.histogram import Hist
from observer.analyse.window import History
from observer.collect.model import Histogram
from observer.jsonsafe import finite


@dataclass(frozen=True)
class OutlierRule:
    """Thresholds of the per-replica outlier test."""

    z: float = 3.5
    min_ratio: float = 1.5
    min_requests: int = 20
    min_replicas: int = 3
    mad_floor: float = 0.05


@dataclass(frozen=True)
class ReplicaStat:
    """One replica's window: TTFT p50 and p95, requests, share of the version's requests, outlier score."""

    replica: str
    ttft_p95: float | None
    requests: float
    ttft_p50: float | None = None
    e2e_p95: float | None = None
    share: float | None = None
    score: float | None = None
    outlier: bool = False


def robust_scores(values: Mapping[str, float], *, mad_floor: float) -> dict[str, float]:
    """Robust z-score of each value against the median and MAD of all of them."""
    xs = list(values.values())
    med = statistics.median(xs)
    mad = statistics.median(abs(x - med) for x in xs)
    scale = 1.4826 * max(mad, mad_floor * abs(med), 1e-12)
    return {k: (x - med) / scale for k, x in values.items()}


def judge(stats: Sequence[ReplicaStat], rule: OutlierRule) -> list[ReplicaStat]:
    """Fill share, score and outlier of each replica's window."""
    total = sum(s.requests for s in stats)
    eligible = {s.replica: float(s.ttft_p50) for s in stats
                if s.ttft_p50 is not None and s.requests >= rule.min_requests}
    scores: dict[str, float] = {}
    med = None
    if len(eligible) >= rule.min_replicas:
        scores = robust_scores(eligible, mad_floor=rule.mad_floor)
        med = statistics.median(eligible.values())
    out = []
    for s in stats:
        score = scores.get(s.replica)
        slow = (score is not None and med is not None and s.ttft_p50 is not None and score >= rule.z
                and s.ttft_p50 >= rule.min_ratio * med)
        out.append(ReplicaStat(replica=s.replica, ttft_p95=s.ttft_p95, ttft_p50=s.ttft_p50, requests=s.requests,
                               e2e_p95=s.e2e_p95,
                               share=s.requests / total if total > 0 else None,
                               score=finite(score) if score is not None else None, outlier=slow))
    return out


@dataclass
class ReplicaTracker:
    """Per replica of one version, bounded histories of its TTFT and end-to-end latency running totals."""

    window_seconds: float
    rule: OutlierRule = field(default_factory=OutlierRule)
    _hist: dict[str, History[Histogram]] = field(default_factory=dict)
    _e2e: dict[str, History[Histogram]] = field(default_factory=dict)

    def _append(self, table: dict[str, History[Histogram]], replicas: Mapping[str, Histogram | None],
                ts: float) -> None:
        for gone in table.keys() - replicas.keys():
            del table[gone]
        for name, h in replicas.items():
            if h is None:
                continue
            hist = table.get(name)
            if hist is None:
                # All points of the last tenth of a window, then one per twentieth up to 1.5 windows: the
                # window's base is found within 5% of its start, at a third of the points of every scrape.
                hist = table[name] = History(fine_seconds=self.window_seconds / 10,
                                             retention_seconds=self.window_seconds * 1.5,
                                             coarse_step_seconds=self.window_seconds / 20)
            hist.append(ts, h)

    def observe(self, replicas: Mapping[str, Histogram | None], ts: float,
                e2e: Mapping[str, Histogram | None] | None = None) -> None:
        """Record this cycle's TTFT (and e2e) totals per replica; replicas not named are forgotten (they left)."""
        self._append(self._hist, replicas, ts)
        self._append(self._e2e, e2e if e2e is not None else {}, ts)

    def _delta(self, table: dict[str, History[Histogram]], name: str, ts: float) -> Histogram | None:
        hist = table.get(name)
        latest, base = (hist.latest(), hist.at(ts - self.window_seconds)) if hist is not None else (None, None)
        if latest is None or base is None or latest[0] <= base[0]:
            return None
        return hmath.delta(latest[1], base[1])

    def window(self, ts: float) -> list[ReplicaStat]:
        """Each replica's window stats, judged against its siblings, in replica order."""
        raw = []
        for name in sorted(self._hist):
            d, e = self._delta(self._hist, name, ts), self._delta(self._e2e, name, ts)
            e2e_p95 = finite(hmath.quantile(0.95, e)) if e is not None and e.count > 0 else None
            if d is None:
                raw.append(ReplicaStat(replica=name, ttft_p95=None, requests=0.0, e2e_p95=e2e_p95))
                continue
            p50, p95 = ((finite(hmath.quantile(0.5, d)), finite(hmath.quantile(0.95, d))) if d.count > 0
                        else (None, None))
            raw.append(ReplicaStat(replica=name, ttft_p95=p95, ttft_p50=p50, requests=float(d.count),
                                   e2e_p95=e2e_p95))
        return judge(raw, self.rule)


COLD_START_BUCKETS: tuple[float, ...] = (5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
"""Seconds from pod start to its first good scrape: model download and load, CUDA graphs, warm-up."""


@dataclass
class ColdStarts(Hist):
    """One version's cold starts (pod start → first good scrape) as an accumulating histogram."""

    edges: tuple[float, ...] = COLD_START_BUCKETS
    last: float | None = None

    @property
    def n(self) -> int:
        """Cold starts counted."""
        return sum(self.counts)

    def observe(self, value: float) -> None:
        """Count one cold start (negative clock skew reads as 0)."""
        self.last = max(0.0, value)
        super().observe(self.last)
