"""Dependent canary traffic: per-pod engines whose requests share queues, bursts, stalls and restarts.

The canary judge's A/A promise is measured on this model (bench/canary.py, tests/unit/test_canary_
dependence.py). It is a fluid model at one-second resolution, not vLLM: each pod has one FCFS prefill
queue whose backlog (prompt tokens not yet prefilled) every arriving request waits behind, so one long
document delays everyone queued after it on *that pod*; decode time per token grows with the pod's
in-flight requests, as it does under continuous batching. Optional, per `TrafficModel`:

* ``bursts``      Markov-modulated arrivals: a 3× burst state entered about every 2 min, left after ~15 s.
* ``stalls``      a pod stops prefilling for 10–30 s (GC, a noisy neighbour, a preemption storm) about
                  once per pod every 20 min; its decode slows 5× meanwhile.
* ``restarts``    a pod restarts about once per pod-hour: every request in flight on it ends with
                  finished_reason=error, and it takes no traffic for 15 s, then comes back with an empty queue.
* ``ramp``        the total rate rises linearly from 0.5× to 1.5× over the step (a diurnal ramp).
* ``cold_seconds`` canary pods start with an empty prefix cache: prefill costs up to 1.6× and the hit
                  ratio climbs from 0 over this many seconds.
* ``occupancy``   sessions stick to a pod (session affinity, prefix-aware routing): each pod's share of the
                  traffic wanders (log-normal, about 3 min to forget), outputs are long (median 400 tokens),
                  and decode slows with the pod's own requests in flight over the last 8 s. A pod busy for
                  minutes decodes every token of every request slower for minutes: with one canary pod, its
                  inter-token latency is dependent across slices, not only within one.

Replica counts follow the weight as Argo's basic canary does (canary = ceil(weight × replicas), the stable
ReplicaSet the rest) and a Service spreads requests evenly over ready pods, so utilisation per pod is equal
in both arms. Output: per-second counts per arm, binned on vLLM's default bucket edges, exactly what the
observer's windowed deltas give the judge.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from observer.conventions.vllm import ITL_EDGES, REQUEST_EDGES, TTFT_EDGES

REASONS: tuple[str, ...] = ("stop", "length", "abort", "error")

# Prompt-length mixture (tokens): chat, RAG, long documents (Pareto tail).
_MIX = (0.70, 0.25, 0.05)
_PREFILL_TOKENS_PER_S = 4000.0
_DECODE_S_PER_TOKEN = 0.015


@dataclass(frozen=True)
class TrafficModel:
    """Which dependence mechanisms are on. `iid` is not one of these: see tests.support.canary_streams."""

    name: str
    bursts: bool = False
    stalls: bool = False
    restarts: bool = False
    ramp: bool = False
    cold_seconds: float = 0.0
    occupancy: bool = False


MODELS: dict[str, TrafficModel] = {m.name: m for m in (
    TrafficModel("pod_queues"),
    TrafficModel("bursts", bursts=True),
    TrafficModel("stalls", stalls=True),
    TrafficModel("error_bursts", restarts=True),
    TrafficModel("ramp", ramp=True),
    TrafficModel("production", bursts=True, stalls=True, restarts=True, ramp=True),
    TrafficModel("occupancy", occupancy=True),
)}
"""The dependent traffic models the judge is calibrated on (plus `iid`)."""


@dataclass(frozen=True)
class Regression:
    """What is worse about the canary (nothing: an A/A step)."""

    ttft_scale: float = 1.0
    error_rate: float = 0.01
    itl_scale: float = 1.0


@dataclass(frozen=True)
class ArmCounts:
    """Per-second counts of one arm: requests, finished reasons (REASONS order), TTFT and e2e buckets
    (finite edges then +Inf, non-cumulative), inter-token buckets (one observation per generated token, at
    the request's arrival second), and prefix-cache hits/queries."""

    requests: np.ndarray  # (T,)
    reasons: np.ndarray  # (T, 4)
    ttft: np.ndarray  # (T, len(TTFT_EDGES) + 1)
    e2e: np.ndarray  # (T, len(REQUEST_EDGES) + 1)
    itl: np.ndarray  # (T, len(ITL_EDGES) + 1)
    prefix_hits: np.ndarray  # (T,)
    prefix_queries: np.ndarray  # (T,)
    pods: int
    by_pod: tuple[ArmCounts, ...] = ()
    """The same counts of each of the arm's pods (`simulate(by_pod=True)`), for judges whose unit is a pod."""


@dataclass(frozen=True)
class PodStep:
    """One simulated canary step on per-pod engines."""

    canary: ArmCounts
    baseline: ArmCounts
    seconds: int


def _markov_bursts(rng: np.random.Generator, seconds: int) -> np.ndarray:
    mult = np.ones(seconds)
    state = False
    for t in range(seconds):
        state = (rng.random() >= 1 / 15) if state else (rng.random() < 1 / 120)
        if state:
            mult[t] = 3.0
    return mult


def _sticky_pods(rng: np.random.Generator, t_req: np.ndarray, pods: int, seconds: int) -> np.ndarray:
    """Each request's pod when sessions stick to pods: pod p's share of second t is ∝ exp(L_p(t)), L_p an
    Ornstein–Uhlenbeck process (sd 0.5, correlation time 180 s): a pod's load wanders over minutes."""
    phi = math.exp(-1.0 / 180.0)
    level = np.zeros((seconds, pods))
    x = rng.normal(0.0, 0.5, pods)
    noise = rng.normal(0.0, 0.5 * math.sqrt(1.0 - phi * phi), (seconds, pods))
    for t in range(seconds):
        x = phi * x + noise[t]
        level[t] = x
    weights = np.exp(level)
    cum = np.cumsum(weights / weights.sum(axis=1, keepdims=True), axis=1)
    u = rng.random(t_req.size)
    out: np.ndarray = np.minimum((cum[t_req] < u[:, None]).sum(axis=1), pods - 1)
    return out


def _episodes(rng: np.random.Generator, pods: int, seconds: int, *, every_s: float, low: float, high: float
              ) -> list[tuple[int, int, int]]:
    """(pod, start, length) episodes: a Poisson process per pod, lengths uniform in [low, high] s."""
    out = []
    for p in range(pods):
        t = rng.exponential(every_s)
        while t < seconds:
            out.append((p, int(t), int(rng.uniform(low, high))))
            t += rng.exponential(every_s)
    return out


def simulate(*, seed: int, model: TrafficModel, seconds: int, total_rps: float, weight: float,
             replicas: int = 20, canary: Regression | None = None, length_rate: float = 0.05,
             abort_rate: float = 0.002, by_pod: bool = False) -> PodStep:
    """Simulate one step of `seconds`: `replicas` pods, ceil(weight × replicas) of them canary; with `by_pod`,
    each arm's counts carry each of its pods' own (ArmCounts.by_pod)."""
    if not 0 < weight < 1:
        raise ValueError(f"weight must be in (0, 1), got {weight}")
    rng = np.random.default_rng(seed)
    reg_c = canary or Regression()
    n_canary = max(1, math.ceil(weight * replicas - 1e-9))
    pods = n_canary + max(1, replicas - n_canary)
    is_canary = np.arange(pods) < n_canary

    rate = np.full(seconds, total_rps, dtype=float)
    if model.ramp:
        rate *= 0.5 + np.arange(seconds) / seconds
    if model.bursts:
        rate *= _markov_bursts(rng, seconds)
    arrivals = rng.poisson(rate)
    total = int(arrivals.sum())
    t_req = np.repeat(np.arange(seconds), arrivals)

    # Which pods are down (restarting) in each second; requests go to a random ready pod.
    down = np.zeros((seconds, pods), dtype=bool)
    restarts = _episodes(rng, pods, seconds, every_s=3600.0, low=15, high=16) if model.restarts else []
    for p, start, length in restarts:
        down[start:start + length, p] = True
    pod = _sticky_pods(rng, t_req, pods, seconds) if model.occupancy else rng.integers(0, pods, size=total)
    blocked = down[t_req, pod]
    if blocked.any():
        for i in np.flatnonzero(blocked):
            ready = np.flatnonzero(~down[t_req[i]])
            pod[i] = rng.choice(ready) if ready.size else pod[i]

    kind = rng.choice(3, size=total, p=_MIX)
    prompt = np.where(kind == 0, rng.lognormal(math.log(200), 0.6, total),
                      np.where(kind == 1, rng.lognormal(math.log(2000), 0.3, total),
                               4000.0 * (1.0 + rng.pareto(1.8, total))))
    prompt = np.minimum(prompt, 32_000.0)
    output = np.minimum(rng.lognormal(math.log(400 if model.occupancy else 150), 0.7, total), 2048.0)

    # Cold canary: prefill costs more while its prefix cache fills.
    hit = np.full(total, 0.5)
    if model.cold_seconds > 0:
        warm = np.minimum(t_req / model.cold_seconds, 1.0)
        hit = np.where(is_canary[pod], 0.5 * warm, 0.5)
    cost = prompt * (1.3 - 0.6 * hit)  # hit 0.5 → 1.0× (the baseline), hit 0 → 1.3×

    stall_left = np.zeros((seconds, pods))
    if model.stalls:
        for p, start, length in _episodes(rng, pods, seconds, every_s=1200.0, low=10, high=30):
            end = min(start + length, seconds)
            stall_left[start:end, p] = np.maximum(stall_left[start:end, p], np.arange(end - start, 0, -1))

    work = np.zeros((seconds, pods))
    np.add.at(work, (t_req, pod), cost)
    reset = np.zeros((seconds, pods), dtype=bool)
    for p, start, length in restarts:
        if start + length < seconds:
            reset[start + length, p] = True
    backlog = np.zeros((seconds, pods))
    b = np.zeros(pods)
    for t in range(seconds):
        b = np.where(reset[t], 0.0, b)
        backlog[t] = b
        cap = np.where(stall_left[t] > 0, 0.0, _PREFILL_TOKENS_PER_S)
        b = np.maximum(0.0, b + work[t] - cap)

    u = rng.random(total)
    wait = stall_left[t_req, pod] + (backlog[t_req, pod] + u * work[t_req, pod]) / _PREFILL_TOKENS_PER_S
    ttft = (0.03 + wait + cost / _PREFILL_TOKENS_PER_S) * rng.lognormal(0.0, 0.15, total)
    ttft = np.where(is_canary[pod], ttft * reg_c.ttft_scale, ttft)

    # In flight per pod ≈ arrivals over the last 4 s; decode slows with batch occupancy and in a stall.
    per_pod = np.zeros((seconds, pods))
    np.add.at(per_pod, (t_req, pod), 1.0)
    inflight = np.cumsum(per_pod, axis=0)
    busy = 8 if model.occupancy else 4  # long outputs stay in the batch longer
    inflight[busy:] = inflight[busy:] - inflight[:-busy]
    itl = _DECODE_S_PER_TOKEN * (1.0 + 0.08 * inflight[t_req, pod]) * np.where(stall_left[t_req, pod] > 0, 5, 1)
    itl = np.where(is_canary[pod], itl * reg_c.itl_scale, itl)
    e2e = ttft + output * itl

    err_rate = np.where(is_canary[pod], reg_c.error_rate, 0.01)
    reason = np.zeros(total, dtype=np.int64)
    r = rng.random(total)
    reason[r < length_rate + abort_rate + err_rate] = 1
    reason[r < abort_rate + err_rate] = 2
    reason[r < err_rate] = 3
    for p, start, _ in restarts:  # every request in flight when the pod dies ends in error
        reason[(pod == p) & (t_req <= start) & (t_req + e2e > start)] = 3

    def arm(mask: np.ndarray, n_pods: int, members: np.ndarray | None = None) -> ArmCounts:
        ts = t_req[mask]
        def binned(values: np.ndarray, edges: tuple[float, ...], weights: np.ndarray | None = None) -> np.ndarray:
            idx = np.searchsorted(np.asarray(edges), values, side="left")  # le is inclusive
            out = np.zeros((seconds, len(edges) + 1), dtype=np.int64)
            np.add.at(out, (ts, idx), 1 if weights is None else weights)
            return out
        reasons = np.zeros((seconds, len(REASONS)), dtype=np.int64)
        np.add.at(reasons, (ts, reason[mask]), 1)
        queries = np.zeros(seconds)
        hits = np.zeros(seconds)
        np.add.at(queries, ts, prompt[mask])
        np.add.at(hits, ts, prompt[mask] * hit[mask])
        return ArmCounts(requests=np.bincount(ts, minlength=seconds), reasons=reasons,
                         ttft=binned(ttft[mask], TTFT_EDGES), e2e=binned(e2e[mask], REQUEST_EDGES),
                         itl=binned(itl[mask], ITL_EDGES, np.maximum(np.round(output[mask]), 1).astype(np.int64)),
                         prefix_hits=hits, prefix_queries=queries, pods=n_pods,
                         by_pod=() if members is None else tuple(arm(mask & (pod == p), 1) for p in members))

    in_canary = is_canary[pod]
    ids = np.arange(pods)
    return PodStep(canary=arm(in_canary, n_canary, ids[is_canary] if by_pod else None),
                   baseline=arm(~in_canary, pods - n_canary, ids[~is_canary] if by_pod else None), seconds=seconds)


def with_cold(model: TrafficModel, seconds: float) -> TrafficModel:
    """`model` with a cold canary for its first `seconds`."""
    return replace(model, name=f"{model.name}+cold", cold_seconds=seconds)
