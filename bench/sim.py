"""Cost of the simulator's built-in load, in the same run as what one would otherwise write:
prometheus_client `Histogram.observe` once per observation (as vLLM itself does per request and per
decode step), fed the very same simulated requests.

    .venv/bin/python -m bench.sim [--requests 20000]

Prints per-request CPU cost of both, their ratio, the core fraction of the default demo load
(10 req/s over the fleet, 5 ticks/s), and the CPU cost of one `/metrics` exposition. Last line: JSON.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram

from observer_dev.sim import vllm_exposition
from observer_dev.sim import vllm_families as fam
from observer_dev.sim.engine import ERROR, SimEngine, draw_requests
from observer_dev.sim.profile import build_profile


def _cpu(fn: object, repeat: int = 1) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()  # type: ignore[operator]
        best = min(best, time.process_time() - t0)
    return best


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=20_000)
    args = parser.parse_args()
    profile = build_profile("healthy")
    n = args.requests
    reqs = draw_requests(profile, n, np.random.default_rng(0))

    engine = SimEngine(model="m", profile=profile, seed=0)
    ours = _cpu(lambda: engine.record(reqs), repeat=3)
    draw = _cpu(lambda: draw_requests(profile, n, np.random.default_rng(1)), repeat=3)

    def per_observation() -> None:
        reg = CollectorRegistry()
        hists = {f.name: Histogram(fam.PREFIX + f.name, f.help, ["model_name", "engine"], buckets=f.buckets,
                                   registry=reg).labels("m", "0") for f in fam.FAMILIES if f.type == "histogram"}
        success = Counter(fam.PREFIX + "request_success", "x", ["model_name", "engine", "finished_reason"],
                          registry=reg)
        offsets = np.concatenate([[0], np.cumsum(np.maximum(reqs.gen_tokens - 1, 0))])
        for i in range(n):
            success.labels("m", "0", fam.FINISHED_REASONS[int(reqs.reasons[i])]).inc()
            if reqs.reasons[i] == ERROR:
                continue
            for name, value in (("time_to_first_token_seconds", reqs.ttft[i]), ("e2e_request_latency_seconds",
                                reqs.e2e[i]), ("request_queue_time_seconds", reqs.queue[i]),
                                ("request_prefill_time_seconds", reqs.prefill[i]),
                                ("request_decode_time_seconds", reqs.decode[i]),
                                ("request_prompt_tokens", reqs.prompt_tokens[i]),
                                ("request_generation_tokens", reqs.gen_tokens[i])):
                if value == value:
                    hists[name].observe(float(value))
            for gap in reqs.itl[offsets[i]:offsets[i + 1]]:
                hists["inter_token_latency_seconds"].observe(float(gap))

    theirs = _cpu(per_observation)
    per_request_ours = (ours + draw) / n
    per_request_theirs = theirs / n

    fleet = SimEngine(model="m", profile=build_profile({"load_rps": 10.0}), seed=1)
    ticks = 5 * 120  # two simulated minutes at 5 ticks/s
    tick_cpu = _cpu(lambda: [fleet.tick(0.2) for _ in range(ticks)])
    core_fraction = tick_cpu / 120.0
    registry = vllm_exposition.build_registry(fleet.snapshot)
    render_ms = _cpu(lambda: [vllm_exposition.render(registry) for _ in range(50)]) / 50 * 1000

    print(f"simulated requests: {n}, decode steps: {int(np.maximum(reqs.gen_tokens - 1, 0).sum())}")
    print(f"simulator (NumPy batches): {per_request_ours * 1e6:.1f} µs CPU per request (draw + record)")
    print(f"prometheus_client observe per observation: {per_request_theirs * 1e6:.1f} µs CPU per request "
          "(recording only)")
    print(f"speed-up: {per_request_theirs / per_request_ours:.1f}x")
    print(f"default demo load (10 req/s, 5 ticks/s): {core_fraction * 100:.2f}% of one core")
    print(f"/metrics exposition of one engine: {render_ms:.2f} ms CPU")
    print(json.dumps({
        "sim_cpu_us_per_request": round(per_request_ours * 1e6, 2),
        "prometheus_client_cpu_us_per_request": round(per_request_theirs * 1e6, 2),
        "speedup_vs_prometheus_client_observe": round(per_request_theirs / per_request_ours, 2),
        "core_fraction_default_load": round(core_fraction, 5),
        "render_ms_per_scrape": round(render_ms, 3),
    }))


if __name__ == "__main__":
    main()
