"""Simulated canary and baseline request streams, for A/A calibration runs and the benchmark.

Not a model of vLLM: a seeded per-second draw of requests split by traffic weight, their finished
reasons, and TTFT / end-to-end latencies binned on vLLM's default bucket edges. The judge sees them
exactly as it sees the observer's windowed deltas (ArmData), so A/A false-fail rates measured here are
the judge's own, with no simulator or scraper in between.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from observer.analyse.canary.judge import ArmData
from observer.collect.model import Histogram

TTFT_EDGES: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                                 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_EDGES: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                                60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
REASONS: tuple[str, ...] = ("stop", "length", "abort", "error")


@dataclass(frozen=True)
class ArmProfile:
    """How one arm behaves: finished-reason rates and log-normal latencies."""

    error_rate: float = 0.01
    abort_rate: float = 0.002
    length_rate: float = 0.05
    ttft_median: float = 0.3
    ttft_sigma: float = 0.5
    e2e_median: float = 3.0
    e2e_sigma: float = 0.6

    def bucket_probs(self, edges: tuple[float, ...], median: float, sigma: float) -> np.ndarray:
        """Probability of each bucket (finite edges, then +Inf) for a log-normal latency."""
        cdf = sps.lognorm.cdf(np.asarray(edges), s=sigma, scale=median)
        p = np.clip(np.diff(np.concatenate(([0.0], cdf, [1.0]))), 0.0, None)
        out: np.ndarray = p / p.sum()
        return out

    def reason_probs(self) -> np.ndarray:
        """Probabilities of stop, length, abort, error."""
        rest = 1.0 - self.error_rate - self.abort_rate - self.length_rate
        return np.array([rest, self.length_rate, self.abort_rate, self.error_rate])


@dataclass(frozen=True)
class ArmStream:
    """Per-second draws of one arm: requests, finished reasons, and non-cumulative bucket counts."""

    requests: np.ndarray  # (T,)
    reasons: np.ndarray  # (T, 4) in REASONS order
    ttft: np.ndarray  # (T, len(TTFT_EDGES)+1)
    e2e: np.ndarray  # (T, len(E2E_EDGES)+1)

    def window(self, start: int, end: int) -> ArmData:
        """What the judge would read for seconds [start, end)."""
        r = self.reasons[start:end].sum(axis=0)
        return ArmData(requests={k: float(v) for k, v in zip(REASONS, r, strict=True)},
                       histograms={"ttft": to_histogram(self.ttft[start:end].sum(axis=0), TTFT_EDGES),
                                   "e2e": to_histogram(self.e2e[start:end].sum(axis=0), E2E_EDGES)})


def to_histogram(counts: np.ndarray, edges: tuple[float, ...]) -> Histogram:
    """A cumulative Histogram from per-bucket counts (the last one is +Inf)."""
    cum = np.cumsum(counts).astype(float)
    return Histogram(bounds=edges, cumulative=tuple(cum.tolist()), sum=0.0, count=float(cum[-1]),
                     le_labels=tuple(repr(e) for e in edges))


def draw(rng: np.random.Generator, requests: np.ndarray, profile: ArmProfile, *, ttft_scale: float = 1.0
         ) -> ArmStream:
    """Draw finished reasons and latency buckets for `requests` per second."""
    reasons = rng.multinomial(requests, profile.reason_probs())
    ttft = rng.multinomial(requests, profile.bucket_probs(TTFT_EDGES, profile.ttft_median * ttft_scale,
                                                          profile.ttft_sigma))
    e2e = rng.multinomial(requests, profile.bucket_probs(E2E_EDGES, profile.e2e_median, profile.e2e_sigma))
    return ArmStream(requests=requests, reasons=reasons, ttft=ttft, e2e=e2e)


@dataclass(frozen=True)
class Step:
    """One simulated canary step: both arms, second by second."""

    canary: ArmStream
    baseline: ArmStream
    seconds: int

    def looks(self, every: int) -> Iterator[tuple[int, ArmData, ArmData]]:
        """(second, canary data, baseline data) cumulative from the step start, every `every` seconds."""
        for t in range(every, self.seconds + 1, every):
            yield t, self.canary.window(0, t), self.baseline.window(0, t)

    def canary_requests(self, t: int) -> int:
        """Canary requests served in the first `t` seconds."""
        return int(self.canary.requests[:t].sum())


def simulate_step(*, seed: int, seconds: int, total_rps: float, weight: float,
                  baseline: ArmProfile | None = None, canary: ArmProfile | None = None,
                  canary_ttft_scale: float = 1.0) -> Step:
    """Simulate one canary step of `seconds` at `total_rps` with the canary taking `weight` of traffic."""
    if not 0 < weight < 1:
        raise ValueError(f"weight must be in (0, 1), got {weight}")
    rng = np.random.default_rng(seed)
    total = rng.poisson(total_rps, size=seconds)
    n_c = rng.binomial(total, weight)
    n_b = total - n_c
    base = baseline or ArmProfile()
    return Step(canary=draw(rng, n_c, canary or base, ttft_scale=canary_ttft_scale),
                baseline=draw(rng, n_b, base), seconds=seconds)


def lognormal_quantile(q: float, median: float, sigma: float) -> float:
    """The q-quantile of a log-normal with this median and log-sd."""
    return median * math.exp(sigma * float(sps.norm.ppf(q)))
