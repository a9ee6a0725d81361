"""Pods as units: the verdict on per-pod traffic with and without the pods-as-units pass test at the planned end.

Each step is one 30-minute canary step on a per-pod traffic model of observer_dev.sim.pods (20 pods, the canary's
replicas following the weight), judged every 60 s with the default config and its planned end at the step's
end, as bench/canary.py judges it. At the planned end the judge is given each pod's own slices too
(ArmData.pods), and the latency metrics may pass on pods as units (observer/analyse/canary/pods.py). Per model
and weight: the share of healthy canaries passed within the step, of TTFT ×1.5 canaries passed at some look,
of healthy canaries failed (A/A), with pods and without; per shift margin (the pass side of the latency shift,
CanaryMetricSpec.shift_margin). And the pods' own figures: the stable pods' spread of the pod shift v and of
the log share above the TTFT edge, and the TTFT ×1.5 canary's mean pod shift.

    .venv/bin/python -m bench.canary_pods              # 60 steps per model, weight and kind
    .venv/bin/python -m bench.canary_pods --quick      # smoke run

Ends with one JSON line: healthy_pass_within_step_by_model, ttft_1.5x_passed_within_step,
aa_false_fail_by_model, pod_spread_by_model.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import statistics
import time
from dataclasses import dataclass

import numpy as np

from observer.analyse import histogram
from observer.analyse.canary import pods as pod_units
from observer.analyse.canary import stats
from observer.analyse.canary.judge import Outcome
from observer.analyse.canary.verdict import judge
from observer.config.canary import CanarySpec, MetricKind
from observer_dev.sim import pods
from tests.support.canary_streams import TTFT_EDGES, any_step

LOOK_SECONDS = 60
WEIGHTS = (0.05, 0.25)
MARGINS = (0.1, 0.06)
KINDS = {"aa": 1.0, "ttft_1.5x": 1.5}


def spec(margin: float, step_seconds: int = 1800) -> CanarySpec:
    """The default config with latency shift margin `margin`, its window holding a step of `step_seconds`."""
    base = CanarySpec()
    return CanarySpec(window_seconds=max(base.window_seconds, step_seconds),
                      metrics=[m.model_copy(update={"shift_margin": margin}) if m.kind == MetricKind.LATENCY else m
                               for m in base.metrics])


@dataclass(frozen=True)
class Run:
    model: str
    weight: float
    kind: str
    failed: dict[str, bool]  # by margin: a fail at any look of the step
    passed_pooled: dict[str, bool]  # a pass at some look, no per-pod data
    passed_pods: dict[str, bool]  # the same, per-pod data at the planned end
    spread: float  # the stable pods' sd of the pod shift v
    log_share_spread: float  # the stable pods' sd of log(share above the TTFT edge)
    canary_shift: float  # the canary pods' mean v − the stable pods' mean v


def simulate(task: tuple[str, float, str, int, int]) -> Run:
    model, weight, kind, seed, seconds = task
    step = any_step(seed=seed, model=model, seconds=seconds, total_rps=20.0, weight=weight,
                    canary_ttft_scale=KINDS[kind], by_pod=True)
    specs = {f"{mg:g}": spec(mg, seconds) for mg in MARGINS}
    failed = dict.fromkeys(specs, False)
    pooled = dict.fromkeys(specs, False)
    with_pods = dict.fromkeys(specs, False)
    for t, c, b in step.looks(LOOK_SECONDS):
        final = t >= seconds
        cp = step.canary.window(0, t, pods="canary") if final else c
        bp = step.baseline.window(0, t, pods="stable") if final else b
        for key, sp in specs.items():
            v = judge(sp, canary="canary", baseline="stable", canary_data=c, baseline_data=b, expected_share=weight,
                      now=float(t), step_seconds=seconds, elapsed_seconds=float(t))
            failed[key] |= v.verdict is Outcome.FAIL
            pooled[key] |= v.verdict is Outcome.PASS
            if final:
                v = judge(sp, canary="canary", baseline="stable", canary_data=cp, baseline_data=bp,
                          expected_share=weight, now=float(t), step_seconds=seconds, elapsed_seconds=float(t))
            with_pods[key] |= v.verdict is Outcome.PASS
    # The pods' own figures at the end: the shift v and the log share above the TTFT edge per pod.
    cp, bp = step.canary.window(0, seconds, pods="canary"), step.baseline.window(0, seconds, pods="stable")
    hb = bp.histograms["ttft"]
    pv = pod_units.pod_values(cp.pods, bp.pods, "ttft", hb.bounds, slices=seconds // LOOK_SECONDS)
    vc, vs = pv.canary, pv.stable
    le = stats.auto_edge(hb, 0.95) or repr(TTFT_EDGES[-1])
    shares = []
    for p in bp.pods.values():
        above, n = histogram.fraction_above(p.histograms["ttft"], le)
        shares.append(math.log((above + 0.5) / (n + 0.5)))
    return Run(model=model, weight=weight, kind=kind, failed=failed, passed_pooled=pooled, passed_pods=with_pods,
               spread=float(np.std(vs, ddof=1)), log_share_spread=float(np.std(shares, ddof=1)),
               canary_shift=float(np.mean(vc) - np.mean(vs)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=60, help="seeded steps per model, weight and kind")
    ap.add_argument("--step-min", type=int, default=30)
    ap.add_argument("--models", default=",".join(pods.MODELS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="3 steps, two models")
    args = ap.parse_args()
    models = args.models.split(",")
    if args.quick:
        args.steps, models = 3, ["pod_queues", "production"]
    t0 = time.monotonic()
    tasks = [(m, w, k, 70_000 + i, args.step_min * 60) for m in models for w in WEIGHTS for k in KINDS
             for i in range(args.steps)]
    with mp.Pool(args.workers) as pool:
        runs = pool.map(simulate, tasks, chunksize=1)
    healthy: dict[str, dict[str, dict[str, float]]] = {}
    slow: dict[str, dict[str, dict[str, float]]] = {}
    aa: dict[str, dict[str, dict[str, float]]] = {}
    spread: dict[str, dict[str, dict[str, float]]] = {}

    def share(rs: list[Run], pick: str, key: str) -> float:
        return sum(getattr(r, pick)[key] for r in rs) / len(rs)

    for m in models:
        healthy[m], slow[m], aa[m], spread[m] = {}, {}, {}, {}
        for w in WEIGHTS:
            wk = f"{int(w * 100)}pct"
            ok = [r for r in runs if r.model == m and r.weight == w and r.kind == "aa"]
            bad = [r for r in runs if r.model == m and r.weight == w and r.kind == "ttft_1.5x"]
            for mg in (f"{x:g}" for x in MARGINS):
                k = f"{wk}@margin{mg}"
                healthy[m][k] = {"pods": share(ok, "passed_pods", mg), "pooled": share(ok, "passed_pooled", mg)}
                slow[m][k] = {"pods": share(bad, "passed_pods", mg), "pooled": share(bad, "passed_pooled", mg)}
                aa[m][k] = share(ok, "failed", mg)
            spread[m][wk] = {"pod_shift_sd": statistics.mean(r.spread for r in ok),
                             "log_share_above_edge_sd": statistics.mean(r.log_share_spread for r in ok),
                             "ttft_1.5x_pod_shift": statistics.mean(r.canary_shift for r in bad)}
    elapsed = time.monotonic() - t0
    print(f"pods as units: {args.steps} steps of {args.step_min} min per model, weight and kind ({elapsed:.0f} s)")
    print("healthy passed within the step, pods | pooled ; TTFT x1.5 passed, pods | pooled ; A/A failed")
    for m in models:
        for k in healthy[m]:
            print(f"  {m:13s} {k:16s} {healthy[m][k]['pods']:4.0%} | {healthy[m][k]['pooled']:4.0%} ; "
                  f"{slow[m][k]['pods']:4.0%} | {slow[m][k]['pooled']:4.0%} ; {aa[m][k]:.1%}")
    print(json.dumps({"healthy_pass_within_step_by_model": healthy, "ttft_1.5x_passed_within_step": slow,
                      "aa_false_fail_by_model": aa, "pod_spread_by_model": spread, "steps": args.steps,
                      "step_seconds": args.step_min * 60, "seconds": round(elapsed, 1)}))


if __name__ == "__main__":
    main()
