"""A simulated vLLM engine: requests drawn from a profile and counted as vLLM counts them.

Requests are simulated arithmetically in NumPy batches (no sleeping, no HTTP), so the built-in load
costs microseconds per tick; HTTP clients of the simulated OpenAI API are recorded the same way.
All state is behind one lock: HTTP handlers, the load ticker and test threads may touch it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from observer.conventions.vllm import ROUTER_TTFT_EDGES
from observer_dev.sim import vllm_families as fam
from observer_dev.sim.profile import Profile

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

REASON_INDEX = {r: i for i, r in enumerate(fam.FINISHED_REASONS)}
STOP, LENGTH, ABORT, ERROR = (REASON_INDEX[r] for r in ("stop", "length", "abort", "error"))

MAX_STEPS_PER_REQUEST = 4096  # bounds the per-step ITL draws of one request


@dataclass(frozen=True)
class Requests:
    """A batch of finished simulated requests (simulated seconds; NaN where a phase did not happen)."""

    queue: FloatArray
    prefill: FloatArray
    decode: FloatArray
    prompt_tokens: IntArray
    gen_tokens: IntArray
    max_tokens: IntArray
    preemptions: IntArray
    reasons: IntArray
    itl: FloatArray
    """Every inter-token gap of every request, request by request."""
    cached_tokens: IntArray

    @property
    def n(self) -> int:
        return int(self.reasons.shape[0])

    @property
    def ttft(self) -> FloatArray:
        return self.queue + self.prefill

    @property
    def e2e(self) -> FloatArray:
        return self.queue + self.prefill + self.decode


def _lognormal(rng: np.random.Generator, median: float, sigma: float, n: int) -> FloatArray:
    return median * np.exp(sigma * rng.standard_normal(n))


def draw_requests(profile: Profile, n: int, rng: np.random.Generator, *,
                  prompt_tokens: Sequence[int] | None = None, gen_tokens: Sequence[int] | None = None,
                  max_tokens: Sequence[int] | None = None, reasons: Sequence[int] | None = None,
                  prompt_factor: FloatArray | None = None) -> Requests:
    """Draw `n` requests from `profile`; given token counts or finish reasons are used as they are.

    `prompt_factor` scales drawn prompt lengths per request (other-domain prompts are longer)."""
    p = profile
    if prompt_tokens is not None:
        prompt = np.asarray(prompt_tokens, dtype=np.int64)
    else:
        drawn = _lognormal(rng, p.prompt_tokens_median, 0.8, n) * (1.0 if prompt_factor is None else prompt_factor)
        prompt = np.clip(np.rint(drawn), 1, 32_000).astype(np.int64)
    limit = (np.asarray(max_tokens, dtype=np.int64) if max_tokens is not None
             else np.full(n, p.max_tokens, dtype=np.int64))
    if reasons is not None:
        reason = np.asarray(reasons, dtype=np.int64)
        gen = np.asarray(gen_tokens, dtype=np.int64) if gen_tokens is not None else np.ones(n, np.int64)
    else:
        gen = (np.asarray(gen_tokens, dtype=np.int64) if gen_tokens is not None else
               np.maximum(np.rint(_lognormal(rng, p.output_tokens_median, 0.7, n)), 1).astype(np.int64))
        reason = np.where(gen > limit, LENGTH, STOP).astype(np.int64)
        gen = np.minimum(gen, limit)
        u = rng.random(n)
        aborted = u < p.abort_rate
        reason[aborted] = ABORT
        gen[aborted] = np.floor(gen[aborted] * rng.random(int(aborted.sum()))).astype(np.int64)
        reason[(u >= p.abort_rate) & (u < p.abort_rate + p.error_rate)] = ERROR
    gen = np.where(reason == ERROR, 0, np.minimum(gen, MAX_STEPS_PER_REQUEST + 1))
    queue = _lognormal(rng, max(p.queue_median_s, 1e-6), 1.0, n) * p.ttft_scale
    if p.queue_median_s == 0:
        queue = np.zeros(n)
    size_factor = (np.maximum(prompt, 1) / 350.0) ** 0.25
    prefill = _lognormal(rng, p.ttft_median_s, 0.45, n) * size_factor * p.ttft_scale
    started = gen > 0
    prefill = np.where(started, prefill, np.nan)
    steps = np.maximum(gen - 1, 0)
    per_request = _lognormal(rng, p.itl_median_s * p.itl_scale, 0.2, n)
    itl = np.repeat(per_request, steps) * np.exp(0.25 * rng.standard_normal(int(steps.sum())))
    owner = np.repeat(np.arange(n), steps)
    decode = np.bincount(owner, weights=itl, minlength=n).astype(np.float64)
    decode = np.where(started, decode, np.nan)
    preempt = (rng.random(n) < p.preemption_rate).astype(np.int64)
    cached = np.floor(prompt * p.prefix_cache_hit_ratio).astype(np.int64)
    return Requests(queue=queue, prefill=prefill, decode=decode, prompt_tokens=prompt, gen_tokens=gen,
                    max_tokens=limit, preemptions=preempt, reasons=reason, itl=itl, cached_tokens=cached)


@dataclass
class HistogramState:
    """Bucket counts (non-cumulative, +Inf last) and sum of one histogram series."""

    edges: FloatArray
    counts: FloatArray
    total: float = 0.0

    @classmethod
    def empty(cls, edges: Sequence[float]) -> HistogramState:
        e = np.asarray(edges, dtype=np.float64)
        return cls(edges=e, counts=np.zeros(len(e) + 1))

    def observe(self, values: FloatArray) -> None:
        """Add observations; NaN (a phase that did not happen) is skipped."""
        v = values[~np.isnan(values)]
        if v.size:
            # `le` semantics: a value equal to an edge belongs to that edge's bucket.
            self.counts += np.bincount(np.searchsorted(self.edges, v, side="left"), minlength=len(self.counts))
            self.total += float(v.sum())


@dataclass(frozen=True)
class EngineSnapshot:
    """A consistent copy of an engine's series, for one exposition."""

    model: str
    created: float
    counters: Mapping[str, float]
    labelled: Mapping[str, Mapping[str, float]]
    histograms: Mapping[str, tuple[tuple[float, ...], float]]
    """family → (cumulative counts incl. +Inf, sum)."""
    gauges: Mapping[str, float]
    http: Mapping[tuple[str, str], float] = field(default_factory=dict)
    profile: Profile = field(default_factory=Profile)
    router: tuple[tuple[float, ...], float, float, float] = ((), 0.0, 0.0, 0.0)
    """What a router in front of this engine saw: (cumulative TTFT counts incl. +Inf on ROUTER_TTFT_EDGES, TTFT sum,
    requests, errors)."""


class SimEngine:
    """One simulated vLLM engine (one replica, engine "0") serving one model."""

    def __init__(self, *, model: str, profile: Profile, seed: int, clock: Callable[[], float] = time.time
                 ) -> None:
        self.model = model
        self.clock = clock
        self.rng = np.random.default_rng(seed)
        self._profile = profile
        self._lock = threading.Lock()
        self._in_flight = 0
        self._mean_inference = 4.0
        self._mean_queue = profile.queue_median_s
        self._mean_tokens = float(profile.prompt_tokens_median + profile.output_tokens_median / 2)
        self.restarts = 0
        self._stuck = 0  # requests a hung engine holds
        # What a router in front of it counted: another process, so an engine restart does not reset it.
        self._router_ttft = HistogramState.empty(ROUTER_TTFT_EDGES)
        self._router_counts = [0.0, 0.0]  # requests, errors
        self._reset()

    @property
    def profile(self) -> Profile:
        return self._profile

    def set_profile(self, profile: Profile) -> None:
        """Switch behaviour from now on (counters keep counting)."""
        with self._lock:
            self._profile = profile
            if not profile.hung:
                self._stuck = 0

    def _reset(self) -> None:
        self.created = self.clock()
        self._counters: dict[str, float] = {f.name: 0.0 for f in fam.FAMILIES if f.type == "counter"
                                            and f.label is None}
        self._labelled: dict[str, dict[str, float]] = {f.name: dict.fromkeys(f.values, 0.0)
                                                       for f in fam.FAMILIES if f.type == "counter" and f.label}
        self._counters.update(spec_decode_num_draft_tokens=0.0, spec_decode_num_accepted_tokens=0.0,  # if speculating
                              corrupted_requests=0.0)  # if checking for NaNs
        self._hists = {f.name: HistogramState.empty(f.buckets) for f in fam.FAMILIES if f.type == "histogram"}
        self._http: dict[tuple[str, str], float] = {}
        self._gauges = {"num_requests_running": 0.0, "num_requests_waiting": 0.0, "kv_cache_usage_perc": 0.0}

    def restart(self) -> None:
        """Simulate a pod restart: every counter and histogram starts again from zero."""
        with self._lock:
            self.restarts += 1
            self._reset()

    def record(self, reqs: Requests) -> None:
        """Count finished requests the way vLLM's stat logger does."""
        with self._lock:
            self._record(reqs)

    def _record(self, r: Requests, *, load: bool = False) -> None:
        if r.n == 0:
            return
        ok = r.reasons != ERROR
        reasons = np.bincount(r.reasons, minlength=len(fam.FINISHED_REASONS))
        legacy = self._profile.legacy_errors
        for name, count in zip(fam.FINISHED_REASONS, reasons, strict=True):
            if legacy and name == "error":
                if load:  # the built-in load's failures answer 500 (API requests count their own status)
                    key = ("/v1/chat/completions", "5xx")
                    self._http[key] = self._http.get(key, 0.0) + float(count)
                continue  # vLLM < 0.13: no `error` finish reason
            self._labelled["request_success"][name] += float(count)
        prompt = r.prompt_tokens[ok].astype(np.float64)
        gen = r.gen_tokens[ok].astype(np.float64)
        cached = r.cached_tokens[ok].astype(np.float64)
        p_sum, g_sum, c_sum = float(prompt.sum()), float(gen.sum()), float(cached.sum())
        c = self._counters
        c["prompt_tokens"] += p_sum
        c["generation_tokens"] += g_sum
        c["prefix_cache_queries"] += p_sum
        c["prefix_cache_hits"] += c_sum
        c["prompt_tokens_cached"] += c_sum
        c["num_preemptions"] += float(r.preemptions.sum())
        c["estimated_flops_per_gpu"] += 1.6e10 * (p_sum + g_sum)
        c["estimated_read_bytes_per_gpu"] += 1.6e7 * g_sum + 1.3e5 * p_sum
        c["estimated_write_bytes_per_gpu"] += 1.3e5 * (p_sum + g_sum)
        by_source = self._labelled["prompt_tokens_by_source"]
        by_source["local_compute"] += p_sum - c_sum
        by_source["local_cache_hit"] += c_sum
        self._labelled["prompt_tokens_cached_by_source"]["device"] += c_sum
        h = self._hists
        h["request_prompt_tokens"].observe(prompt)
        h["request_generation_tokens"].observe(gen)
        h["iteration_tokens_total"].observe(prompt + self._gauges["num_requests_running"])
        h["request_max_num_generation_tokens"].observe(gen)
        h["request_params_n"].observe(np.ones(prompt.shape[0]))
        h["request_params_max_tokens"].observe(r.max_tokens[ok].astype(np.float64))
        h["time_to_first_token_seconds"].observe(r.ttft[ok])
        if self._profile.corrupted_rate is not None:  # they finish like any other request, with garbage
            c["corrupted_requests"] += float(self.rng.binomial(int(ok.sum()), self._profile.corrupted_rate))
        if self._profile.spec_decode_acceptance is not None and g_sum > 0:
            # Three draft tokens per verification step; accepted ones are generated tokens the step saved.
            draft = round(0.75 * g_sum)
            accepted = self.rng.binomial(draft, self._profile.spec_decode_acceptance)
            c["spec_decode_num_draft_tokens"] += float(draft)
            c["spec_decode_num_accepted_tokens"] += float(accepted)
        self._router_ttft.observe(r.ttft[ok] + self._profile.router_queue_s)
        self._router_counts[0] += float(r.n)
        self._router_counts[1] += float(r.n - int(ok.sum()))
        h["inter_token_latency_seconds"].observe(r.itl)
        steps = np.maximum(r.gen_tokens[ok] - 1, 0)
        with np.errstate(invalid="ignore", divide="ignore"):
            tpot = np.where(steps > 0, r.decode[ok] / steps, np.nan)
        h["request_time_per_output_token_seconds"].observe(tpot)
        # An aborted request that never started still spent its queue time end to end.
        h["e2e_request_latency_seconds"].observe(r.queue[ok] + np.nan_to_num(r.prefill[ok])
                                                 + np.nan_to_num(r.decode[ok]))
        h["request_queue_time_seconds"].observe(r.queue[ok])
        h["request_inference_time_seconds"].observe(r.prefill[ok] + r.decode[ok])
        h["request_prefill_time_seconds"].observe(r.prefill[ok])
        h["request_decode_time_seconds"].observe(r.decode[ok])
        h["request_num_preemptions"].observe(r.preemptions[ok].astype(np.float64))
        h["request_prefill_kv_computed_tokens"].observe(prompt - cached)
        started = ok & (r.gen_tokens > 0)
        if started.any():
            # Smoothed means feed the Little's-law gauges below.
            inf = float(np.nanmean(r.prefill[started] + r.decode[started]))
            self._mean_inference += 0.2 * (inf - self._mean_inference)
            self._mean_queue += 0.2 * (float(np.mean(r.queue[started])) - self._mean_queue)
            tokens = float(np.mean(r.prompt_tokens[started] + r.gen_tokens[started] / 2))
            self._mean_tokens += 0.2 * (tokens - self._mean_tokens)

    def tick(self, dt: float, *, prompt_factors: Callable[[int], FloatArray] | None = None) -> Requests:
        """Advance the built-in load by `dt` simulated seconds: draw, count, refresh the gauges.

        `prompt_factors(n)` is asked for the per-request prompt-length factors of the n new requests."""
        with self._lock:
            p = self._profile
            n = int(self.rng.poisson(p.load_rps * dt)) if p.load_rps > 0 and dt > 0 and not p.asleep else 0
            if n and p.admission_reject_rate:
                refused = int(self.rng.binomial(n, p.admission_reject_rate))
                n -= refused  # answered 503 before the engine: in no finished count, in no histogram
                self._labelled["admission_rejections"]["max_num_queued_reqs"] += float(refused)
                key = ("/v1/chat/completions", "5xx")
                self._http[key] = self._http.get(key, 0.0) + float(refused)
            if p.hung:  # the requests arrive and run; none finishes
                self._stuck = min(self._stuck + n, 10_000)
                n = 0
            factors = prompt_factors(n) if prompt_factors is not None and n else None
            reqs = draw_requests(p, n, self.rng, prompt_factor=factors)
            self._record(reqs, load=True)
            self._update_gauges()
            return reqs

    def _update_gauges(self) -> None:
        p = self._profile
        running = float(self._in_flight + self._stuck)
        waiting = 0.0
        if p.load_rps > 0 and not p.asleep and not p.hung:
            running += float(self.rng.poisson(p.load_rps * self._mean_inference))
            waiting += float(self.rng.poisson(p.load_rps * self._mean_queue))
        kv = min(1.0, running * self._mean_tokens / p.kv_capacity_tokens)
        if kv >= 0.95:
            # A full KV cache preempts running requests, as vLLM's scheduler does.
            self._counters["num_preemptions"] += float(self.rng.poisson(1.0))
        self._gauges.update(num_requests_running=running, num_requests_waiting=waiting,
                            kv_cache_usage_perc=round(kv, 4))

    def begin_request(self) -> None:
        """An API request entered the engine (counts as running until `end_request`)."""
        with self._lock:
            self._in_flight += 1
            self._update_gauges()

    def end_request(self, *, handler: str, status: int, reqs: Requests | None, begun: bool = True) -> None:
        """An API request finished: count its engine statistics and its HTTP status.

        `begun` is False for a request refused before it reached the engine (bad input)."""
        with self._lock:
            if begun:
                self._in_flight = max(0, self._in_flight - 1)
            if reqs is not None:
                self._record(reqs)
            key = (handler, f"{status // 100}xx")
            self._http[key] = self._http.get(key, 0.0) + 1.0
            self._update_gauges()

    def reject_admission(self, *, handler: str) -> None:
        """An API request refused by a queue limit: vLLM answers 503 and counts it by reason, never finished."""
        with self._lock:
            self._labelled["admission_rejections"]["max_num_queued_reqs"] += 1.0
            key = (handler, "5xx")
            self._http[key] = self._http.get(key, 0.0) + 1.0

    def draw(self, n: int = 1, *, prompt_tokens: Sequence[int] | None = None,
             gen_tokens: Sequence[int] | None = None, max_tokens: Sequence[int] | None = None,
             reasons: Sequence[int] | None = None) -> Requests:
        """Draw requests from the current profile with this engine's RNG (for API requests)."""
        with self._lock:
            return draw_requests(self._profile, n, self.rng, prompt_tokens=prompt_tokens, gen_tokens=gen_tokens,
                                 max_tokens=max_tokens, reasons=reasons)

    def uniform(self) -> float:
        """One uniform draw from this engine's seeded RNG."""
        with self._lock:
            return float(self.rng.random())

    def snapshot(self) -> EngineSnapshot:
        """Copy every series under the lock."""
        with self._lock:
            hists = {k: (tuple(np.cumsum(h.counts).tolist()), h.total) for k, h in self._hists.items()}
            return EngineSnapshot(model=self.model, created=self.created, counters=dict(self._counters),
                                  labelled={k: dict(v) for k, v in self._labelled.items()},
                                  histograms=hists, gauges=dict(self._gauges), http=dict(self._http),
                                  profile=self._profile,
                                  router=(tuple(np.cumsum(self._router_ttft.counts).tolist()),
                                          self._router_ttft.total, self._router_counts[0], self._router_counts[1]))
