"""Simulated canary and baseline request streams, for A/A calibration runs and the benchmark.

Two traffic models feed the same per-second arrays: `simulate_step` is the `iid` one (every request an
independent draw: Poisson arrivals, log-normal latencies), `pod_step` the dependent ones of
observer_dev.sim.pods (per-pod queues, bursts, stalls, restarts, a ramp). Requests, finished reasons and
TTFT / inter-token / end-to-end latencies are binned on vLLM's default bucket edges; the judge sees them exactly as it
sees the observer's windowed deltas (ArmData with one-minute slices), so A/A false-fail rates measured
here are the judge's own, with no simulator or scraper in between.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as sps

from observer.analyse.canary.judge import ArmData, Verdict
from observer.analyse.canary.verdict import judge
from observer.collect.model import Histogram
from observer.config.canary import CanaryMetricSpec, CanarySpec
from observer.conventions import vllm
from observer_dev.sim import pods

SLICE_SECONDS = 60
"""Slice length the judge's sources use (canary.slice_seconds)."""

TTFT_EDGES: tuple[float, ...] = vllm.TTFT_EDGES
E2E_EDGES: tuple[float, ...] = vllm.REQUEST_EDGES
ITL_EDGES: tuple[float, ...] = vllm.ITL_EDGES
REASONS: tuple[str, ...] = pods.REASONS


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
    itl_median: float = 0.025
    itl_sigma: float = 0.3
    output_tokens_median: float = 150.0

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
    itl: np.ndarray | None = None  # (T, len(ITL_EDGES)+1): one observation per generated token
    pods: int | None = None
    prefix_hits: np.ndarray | None = None
    prefix_queries: np.ndarray | None = None
    by_pod: tuple[ArmStream, ...] = ()
    """Each pod's own draws (pod_step(by_pod=True)), for the pods-as-units test."""
    _cache: dict[tuple[int, int], ArmData] = field(default_factory=dict, compare=False, repr=False)

    def totals(self, start: int, end: int) -> ArmData:
        """Requests and histograms for seconds [start, end), no slices (cached)."""
        key = (start, end)
        if key not in self._cache:
            r = self.reasons[start:end].sum(axis=0)
            hists = {"ttft": to_histogram(self.ttft[start:end].sum(axis=0), TTFT_EDGES),
                     "e2e": to_histogram(self.e2e[start:end].sum(axis=0), E2E_EDGES)}
            if self.itl is not None:
                hists["itl"] = to_histogram(self.itl[start:end].sum(axis=0), ITL_EDGES)
            self._cache[key] = ArmData(requests={k: float(v) for k, v in zip(REASONS, r, strict=True)},
                                       histograms=hists)
        return self._cache[key]

    def window(self, start: int, end: int, *, slice_seconds: int | None = SLICE_SECONDS, pods: str = "") -> ArmData:
        """What the judge would read for seconds [start, end): totals, slices, replicas, recent hit ratio; with
        `pods` (a name prefix) and per-pod draws, each pod's window too, named `{pods}-{i}`."""
        whole = self.totals(start, end)
        slices: tuple[ArmData, ...] = ()
        if slice_seconds:
            slices = tuple(self.totals(a, min(a + slice_seconds, end)) for a in range(start, end, slice_seconds))
        hit = None
        if self.prefix_hits is not None and self.prefix_queries is not None:
            lo = max(start, end - 120)
            q = float(self.prefix_queries[lo:end].sum())
            hit = float(self.prefix_hits[lo:end].sum()) / q if q > 0 else None
        by_pod = {f"{pods}-{i}": p.window(start, end, slice_seconds=slice_seconds)
                  for i, p in enumerate(self.by_pod)} if pods else {}
        return ArmData(requests=whole.requests, histograms=whole.histograms, slices=slices,
                       replicas=self.pods, prefix_cache_hit_ratio=hit, pods=by_pod)


def to_histogram(counts: np.ndarray, edges: tuple[float, ...]) -> Histogram:
    """A cumulative Histogram from per-bucket counts (the last one is +Inf)."""
    cum = np.cumsum(counts).astype(float)
    return Histogram(bounds=edges, cumulative=tuple(cum.tolist()), sum=0.0, count=float(cum[-1]),
                     le_labels=tuple(repr(e) for e in edges))


def token_binned(seconds: np.ndarray, itl: np.ndarray, tokens: np.ndarray, horizon: int) -> np.ndarray:
    """Per-second inter-token buckets: every token of a request observed at the request's own ITL (the
    strongest within-request dependence: a slow request is slow on every token), at its arrival second."""
    idx = np.searchsorted(np.asarray(ITL_EDGES), itl, side="left")  # le is inclusive
    out = np.zeros((horizon, len(ITL_EDGES) + 1), dtype=np.int64)
    np.add.at(out, (seconds, idx), np.maximum(np.round(tokens), 1).astype(np.int64))
    return out


def draw(rng: np.random.Generator, requests: np.ndarray, profile: ArmProfile, *, ttft_scale: float = 1.0,
         itl_scale: float = 1.0) -> ArmStream:
    """Draw finished reasons and latency buckets for `requests` per second."""
    reasons = rng.multinomial(requests, profile.reason_probs())
    ttft = rng.multinomial(requests, profile.bucket_probs(TTFT_EDGES, profile.ttft_median * ttft_scale,
                                                          profile.ttft_sigma))
    e2e = rng.multinomial(requests, profile.bucket_probs(E2E_EDGES, profile.e2e_median, profile.e2e_sigma))
    total = int(requests.sum())
    itl = rng.lognormal(math.log(profile.itl_median * itl_scale), profile.itl_sigma, total)
    tokens = np.minimum(rng.lognormal(math.log(profile.output_tokens_median), 0.7, total), 2048.0)
    itl_buckets = token_binned(np.repeat(np.arange(len(requests)), requests), itl, tokens, len(requests))
    return ArmStream(requests=requests, reasons=reasons, ttft=ttft, e2e=e2e, itl=itl_buckets)


@dataclass(frozen=True)
class Step:
    """One simulated canary step: both arms, second by second."""

    canary: ArmStream
    baseline: ArmStream
    seconds: int

    def looks(self, every: int, *, slice_seconds: int | None = SLICE_SECONDS
              ) -> Iterator[tuple[int, ArmData, ArmData]]:
        """(second, canary data, baseline data) cumulative from the step start, every `every` seconds."""
        for t in range(every, self.seconds + 1, every):
            yield (t, self.canary.window(0, t, slice_seconds=slice_seconds),
                   self.baseline.window(0, t, slice_seconds=slice_seconds))

    def canary_requests(self, t: int) -> int:
        """Canary requests served in the first `t` seconds."""
        return int(self.canary.requests[:t].sum())


def simulate_step(*, seed: int, seconds: int, total_rps: float, weight: float,
                  baseline: ArmProfile | None = None, canary: ArmProfile | None = None,
                  canary_ttft_scale: float = 1.0, canary_itl_scale: float = 1.0) -> Step:
    """Simulate one canary step of `seconds` at `total_rps` with the canary taking `weight` of traffic."""
    if not 0 < weight < 1:
        raise ValueError(f"weight must be in (0, 1), got {weight}")
    rng = np.random.default_rng(seed)
    total = rng.poisson(total_rps, size=seconds)
    n_c = rng.binomial(total, weight)
    n_b = total - n_c
    base = baseline or ArmProfile()
    return Step(canary=draw(rng, n_c, canary or base, ttft_scale=canary_ttft_scale, itl_scale=canary_itl_scale),
                baseline=draw(rng, n_b, base), seconds=seconds)


def lognormal_quantile(q: float, median: float, sigma: float) -> float:
    """The q-quantile of a log-normal with this median and log-sd."""
    return median * math.exp(sigma * float(sps.norm.ppf(q)))


def pod_step(*, seed: int, model: str | pods.TrafficModel, seconds: int, total_rps: float, weight: float,
             canary_ttft_scale: float = 1.0, canary_error_rate: float = 0.01, canary_itl_scale: float = 1.0,
             by_pod: bool = False) -> Step:
    """One step on the dependent traffic model `model` (a name in observer_dev.sim.pods.MODELS, or one); with
    `by_pod`, each arm carries its pods' own draws."""
    tm = pods.MODELS[model] if isinstance(model, str) else model
    s = pods.simulate(seed=seed, model=tm, seconds=seconds, total_rps=total_rps, weight=weight,
                      canary=pods.Regression(ttft_scale=canary_ttft_scale, error_rate=canary_error_rate,
                                             itl_scale=canary_itl_scale), by_pod=by_pod)

    def arm(a: pods.ArmCounts) -> ArmStream:
        return ArmStream(requests=a.requests, reasons=a.reasons, ttft=a.ttft, e2e=a.e2e, itl=a.itl, pods=a.pods,
                         prefix_hits=a.prefix_hits, prefix_queries=a.prefix_queries,
                         by_pod=tuple(arm(p) for p in a.by_pod))

    return Step(canary=arm(s.canary), baseline=arm(s.baseline), seconds=seconds)


def any_step(*, seed: int, model: str, seconds: int, total_rps: float, weight: float,
             canary_ttft_scale: float = 1.0, canary_error_rate: float = 0.01, canary_itl_scale: float = 1.0,
             by_pod: bool = False) -> Step:
    """A step on traffic model `model`: `iid` or one of observer_dev.sim.pods.MODELS (with `by_pod`, each arm
    carries its pods' own draws; `iid` has no pods)."""
    if model == "iid":
        return simulate_step(seed=seed, seconds=seconds, total_rps=total_rps, weight=weight,
                             canary=ArmProfile(error_rate=canary_error_rate), canary_ttft_scale=canary_ttft_scale,
                             canary_itl_scale=canary_itl_scale)
    return pod_step(seed=seed, model=model, seconds=seconds, total_rps=total_rps, weight=weight,
                    canary_ttft_scale=canary_ttft_scale, canary_error_rate=canary_error_rate,
                    canary_itl_scale=canary_itl_scale, by_pod=by_pod)


def judged_step(spec: CanarySpec, seed: int, dress: Callable[[ArmData, ArmData, np.random.Generator],
                                                             tuple[ArmData, ArmData]]) -> Verdict:
    """The verdict of `spec` on one 15-minute step at 20 requests/s, a quarter to the canary, with each arm's
    window dressed by `dress` (canary, baseline, the seed's generator): extra counters per slice."""
    st = simulate_step(seed=seed, seconds=900, total_rps=20, weight=0.25)
    c, b = dress(st.canary.window(0, 900), st.baseline.window(0, 900), np.random.default_rng(seed))
    return judge(spec, canary="canary", baseline="stable", canary_data=c, baseline_data=b, expected_share=0.25,
                 now=1.0)


PAIR_FLEET = """
fleet:
  versions:
    - {name: stable, role: stable, expected_traffic_weight: 0.75}
    - {name: canary, role: canary, expected_traffic_weight: 0.25}
"""
"""A config's fleet of one stable and one canary version (25 %), for a CanaryService over StreamSource."""


class StreamSource:
    """A CanarySource over simulated streams: the arm's data since `since` (clock seconds from 0)."""

    name = "streams"

    def __init__(self, *, canary: ArmProfile | None = None, ttft_scale: float = 1.0, seconds: int = 1800,
                 weight: float = 0.25) -> None:
        self.step = simulate_step(seed=5, seconds=seconds, total_rps=20, weight=weight, canary=canary,
                                  canary_ttft_scale=ttft_scale)
        self.calls: list[tuple[str, float, float]] = []

    async def arm(self, version: str, metrics: Sequence[CanaryMetricSpec], *, since: float, now: float,
                  with_drift: bool) -> ArmData:
        self.calls.append((version, since, now))
        stream = self.step.canary if version == "canary" else self.step.baseline
        return stream.window(max(0, int(since)), int(now))
