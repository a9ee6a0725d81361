"""Per-replica outlier test (issue #18 item 2) on dependent per-pod traffic: the observer's median-based
robust z-score against the same rule on each replica's p95 (what a user would otherwise compare), in the
same run, over seeded trials; and the memory the per-replica histories hold.

Traffic (tests/support/pod_traffic.py): per pod, an AR(1) load level that raises a shared queueing delay
for runs of requests, prefill shared by batches of 8, one stall of 10 requests per window, 150–400
requests per pod (uneven routing). A slow pod is 3× slower on every request.

    .venv/bin/python -m bench.replicas [--trials 300]
"""

from __future__ import annotations

import argparse
import json
import time
import tracemalloc

import numpy as np

from observer.analyse.replicas import ReplicaTracker
from tests.support.pod_traffic import hist, pod_traffic, trial


def rates(trials: int, seed: int, statistic: str) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    false_alarm = sum(not trial(rng, 6, None, statistic=statistic) for _ in range(trials)) / trials
    power6 = sum(trial(rng, 6, 2, statistic=statistic) for _ in range(trials)) / trials
    power4 = sum(trial(rng, 4, 1, statistic=statistic) for _ in range(trials)) / trials
    return {"false_alarm": false_alarm, "power_6_pods": power6, "power_4_pods": power4}


def memory_per_replica(replicas: int = 200, interval: float = 5.0, window: float = 300.0) -> float:
    """kB held per replica by the tracker after 200 scrape cycles (beyond 1.5 windows), both histograms."""
    rng = np.random.default_rng(0)
    base = hist(pod_traffic(rng, 1000, 1.0))
    tracemalloc.start()
    t = ReplicaTracker(window_seconds=window)
    for k in range(200):
        hs = {f"pod-{i}": base.__class__(bounds=base.bounds, cumulative=tuple(c + k for c in base.cumulative),
                                         sum=base.sum + k, count=base.count + k) for i in range(replicas)}
        t.observe(hs, k * interval, e2e=hs)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return held / replicas / 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=300)
    args = ap.parse_args()
    t0 = time.perf_counter()
    median, p95 = rates(args.trials, 18, "p50"), rates(args.trials, 18, "p95")
    kb = memory_per_replica()
    print(f"false alarms per 6-pod window: median {median['false_alarm']:.4f}, p95 {p95['false_alarm']:.4f} "
          f"({p95['false_alarm'] / max(median['false_alarm'], 1 / args.trials):.0f}× with p95)")
    print(f"power on a 3× slower pod: median {median['power_6_pods']:.3f} (6 pods), {median['power_4_pods']:.3f} "
          f"(4 pods); p95 {p95['power_6_pods']:.3f}, {p95['power_4_pods']:.3f}")
    print(f"memory: {kb:.1f} kB per replica (TTFT and e2e histories, 5 s interval, 300 s window)")
    print(json.dumps({"trials": args.trials, "median_false_alarm_rate": median["false_alarm"],
                      "p95_false_alarm_rate": p95["false_alarm"], "median_power_6_pods": median["power_6_pods"],
                      "median_power_4_pods": median["power_4_pods"], "p95_power_6_pods": p95["power_6_pods"],
                      "p95_power_4_pods": p95["power_4_pods"], "kb_per_replica": round(kb, 1),
                      "seconds": round(time.perf_counter() - t0, 1)}, sort_keys=True))


if __name__ == "__main__":
    main()
