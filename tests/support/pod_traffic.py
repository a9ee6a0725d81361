"""Per-pod TTFT traffic as production makes it (dependent within a pod) and per-replica outlier trials, for
tests/unit/test_replica_outliers.py and bench/replicas.py."""

from __future__ import annotations

import numpy as np

from observer.analyse.replicas import ReplicaStat, ReplicaTracker, judge
from observer.collect.model import Histogram

EDGES = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)  # vLLM TTFT


def hist(samples: np.ndarray) -> Histogram:
    cum = (*(float(np.sum(samples <= b)) for b in EDGES), float(len(samples)))
    return Histogram(bounds=EDGES, cumulative=cum, sum=float(samples.sum()), count=float(len(samples)))


def pod_traffic(rng: np.random.Generator, n: int, scale: float) -> np.ndarray:
    """TTFTs of one pod over one window, dependent as production is: bursts raise a shared queueing
    delay for runs of requests (an AR(1) load level), batches share their prefill, one stall per window."""
    level = np.empty(n)
    x = 0.0
    for i in range(n):
        x = 0.9 * x + rng.normal(0, 0.3)
        level[i] = x
    queue = 0.02 * np.exp(np.clip(level, -3, 3))
    batch = np.repeat(rng.lognormal(np.log(0.08), 0.35, size=n // 8 + 1), 8)[:n]
    out = (batch + queue) * scale
    stall = rng.integers(0, n - 10)
    out[stall:stall + 10] += rng.uniform(0.2, 0.6)
    return out


def trial(rng: np.random.Generator, pods: int, slow: int | None, *, statistic: str = "p50") -> bool:
    """One window of `pods` pods (pod `slow` 3× slower, or none): whether the outlier test flags exactly the
    slow one. `statistic` "p95" runs the same rule on each replica's p95 instead of its median (what a user
    would otherwise compare)."""
    tracker = ReplicaTracker(window_seconds=60.0)
    start = {f"p{i}": hist(np.zeros(0)) for i in range(pods)}
    tracker.observe(start, 0.0)
    window = {}
    for i in range(pods):
        n = int(rng.integers(150, 400))  # uneven routing between pods
        window[f"p{i}"] = hist(pod_traffic(rng, n, 3.0 if i == slow else 1.0))
    tracker.observe(window, 60.0)
    stats = tracker.window(60.0)
    if statistic == "p95":
        stats = judge([ReplicaStat(replica=s.replica, ttft_p95=s.ttft_p95, requests=s.requests, ttft_p50=s.ttft_p95)
                       for s in stats], tracker.rule)
    flagged = {s.replica for s in stats if s.outlier}
    return flagged == ({f"p{slow}"} if slow is not None else set())
