"""Canary judges compared on the same simulated streams: requests of canary traffic to a correct Fail, and
A/A false-fail rates.

Methods, all fed the same per-second draws (tests.support.canary_streams):
  observer        this project's judge (default config), looking every 30 s at the data since step start.
  fixed_threshold the reference architecture's template: every 2 min the canary's P95 TTFT (or error
                  rate) over the last 2 min must be under a fixed threshold; failureLimit 2 (the 3rd failed
                  measurement aborts); an empty window is NaN, which fails a success-only condition.
  kayenta_style   Kayenta's judge on 1-minute buckets: per metric a one-sided Mann-Whitney test of canary
                  vs baseline bucket values (98% two-sided CI ⇒ p < 0.01 one-sided); any metric failing
                  drops the two-metric score to ≤ 50 < marginal 75, i.e. Fail. Judged every minute.

Scenarios: TTFT × 1.5 and errors 1% → 2%, at 5% and 25% canary weight, `--rps` requests/s in total.
Prints a table, then one JSON line with aa_false_fail_rate (ours) and requests_to_fail
(method → scenario → median canary requests at the first Fail over the runs that failed; null if fewer
than half of the runs failed within the horizon).

    .venv/bin/python bench/canary.py            # default: 20 runs per scenario, 200 A/A runs
    .venv/bin/python bench/canary.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from scipy import stats as sps

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from observer.analyse import histogram
from observer.analyse.canary.judge import Outcome, judge
from observer.config.canary import CanarySpec
from tests.support.canary_streams import (
    TTFT_EDGES,
    ArmProfile,
    Step,
    lognormal_quantile,
    simulate_step,
    to_histogram,
)

LOOK_SECONDS = 30
FIXED_INTERVAL = 120
FIXED_FAILURE_LIMIT = 2
KAYENTA_BUCKET = 60
KAYENTA_ALPHA = 0.01

Method = Callable[[Step, float, str], int | None]
"""(step, weight, scenario kind) → second of the first Fail, or None."""


def observer_judge(step: Step, weight: float, _: str) -> int | None:
    spec = CanarySpec()
    for t, c, b in step.looks(LOOK_SECONDS):
        v = judge(spec, canary="canary", baseline="stable", canary_data=c, baseline_data=b,
                  expected_share=weight, now=float(t))
        if v.verdict is Outcome.FAIL:
            return t
    return None


def fixed_threshold(ttft_threshold: float, error_threshold: float) -> Method:
    def run(step: Step, _: float, kind: str) -> int | None:
        failures = 0
        for t in range(FIXED_INTERVAL, step.seconds + 1, FIXED_INTERVAL):
            lo = t - FIXED_INTERVAL
            if kind == "ttft":
                h = to_histogram(step.canary.ttft[lo:t].sum(axis=0), TTFT_EDGES)
                value = histogram.quantile(0.95, h)
                ok = not math.isnan(value) and value < ttft_threshold
            else:
                n = int(step.canary.requests[lo:t].sum())
                value = step.canary.reasons[lo:t, 3].sum() / n if n else math.nan
                ok = not math.isnan(value) and value < error_threshold
            if not ok:
                failures += 1
                if failures > FIXED_FAILURE_LIMIT:
                    return t
        return None

    return run


def _bucket_values(step: Step, arm: str, kind: str, minutes: int) -> list[float]:
    s = getattr(step, arm)
    out: list[float] = []
    for m in range(minutes):
        lo, hi = m * KAYENTA_BUCKET, (m + 1) * KAYENTA_BUCKET
        n = int(s.requests[lo:hi].sum())
        if n == 0:
            continue
        if kind == "ttft":
            out.append(histogram.quantile(0.95, to_histogram(s.ttft[lo:hi].sum(axis=0), TTFT_EDGES)))
        else:
            out.append(float(s.reasons[lo:hi, 3].sum()) / n)
    return out


def kayenta_style(step: Step, _: float, __: str) -> int | None:
    for t in range(KAYENTA_BUCKET * 3, step.seconds + 1, KAYENTA_BUCKET):
        minutes = t // KAYENTA_BUCKET
        for kind in ("ttft", "errors"):
            c = _bucket_values(step, "canary", kind, minutes)
            b = _bucket_values(step, "baseline", kind, minutes)
            if len(c) < 3 or len(b) < 3 or len(set(c) | set(b)) < 2:
                continue
            p = float(sps.mannwhitneyu(c, b, alternative="greater").pvalue)
            if p < KAYENTA_ALPHA:
                return t
    return None


def scenario_step(seed: int, *, kind: str, weight: float, seconds: int, rps: float) -> Step:
    if kind == "ttft":
        return simulate_step(seed=seed, seconds=seconds, total_rps=rps, weight=weight, canary_ttft_scale=1.5)
    if kind == "errors":
        return simulate_step(seed=seed, seconds=seconds, total_rps=rps, weight=weight,
                             canary=ArmProfile(error_rate=0.02))
    return simulate_step(seed=seed, seconds=seconds, total_rps=rps, weight=weight)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="seeded runs per regression scenario")
    ap.add_argument("--aa-runs", type=int, default=200, help="seeded A/A runs (half at 5%%, half at 25%%)")
    ap.add_argument("--rps", type=float, default=20.0, help="total requests per second (both arms)")
    ap.add_argument("--horizon-min", type=int, default=90, help="longest regression run, minutes")
    ap.add_argument("--step-min", type=int, default=30, help="A/A canary step length, minutes")
    ap.add_argument("--quick", action="store_true", help="5 runs, 40 A/A runs")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.aa_runs = 5, 40
    base = ArmProfile()
    healthy_p95 = lognormal_quantile(0.95, base.ttft_median, base.ttft_sigma)
    # A threshold a user would pick for "P95 TTFT < X": between healthy (≈0.68 s) and 1.5× (≈1.02 s) P95,
    # and an error-rate threshold between 1% and 2%: told the answer, the best a fixed template can do.
    methods: dict[str, Method] = {
        "observer": observer_judge,
        "fixed_threshold": fixed_threshold(ttft_threshold=round(healthy_p95 * 1.25, 2), error_threshold=0.015),
        "kayenta_style": kayenta_style,
    }
    t0 = time.monotonic()
    requests: dict[str, dict[str, float | None]] = {m: {} for m in methods}
    detected: dict[str, dict[str, float]] = {m: {} for m in methods}
    for kind in ("ttft", "errors"):
        for weight in (0.05, 0.25):
            scenario = f"{'ttft_p95_1.5x' if kind == 'ttft' else 'errors_1to2pct'}@{int(weight * 100)}pct"
            found: dict[str, list[int]] = {m: [] for m in methods}
            for r in range(args.runs):
                step = scenario_step(1000 + r, kind=kind, weight=weight, seconds=args.horizon_min * 60,
                                     rps=args.rps)
                for name, method in methods.items():
                    t = method(step, weight, kind)
                    if t is not None:
                        found[name].append(step.canary_requests(t))
            for name in methods:
                hits = found[name]
                detected[name][scenario] = len(hits) / args.runs
                requests[name][scenario] = (float(statistics.median(hits))
                                            if len(hits) * 2 >= args.runs else None)
    aa: dict[str, float] = {}
    aa_fails = dict.fromkeys(methods, 0)
    for r in range(args.aa_runs):
        weight = 0.05 if r % 2 == 0 else 0.25
        step = scenario_step(50_000 + r, kind="aa", weight=weight, seconds=args.step_min * 60, rps=args.rps)
        for name, method in methods.items():
            if method(step, weight, "ttft" if r % 4 < 2 else "errors") is not None:
                aa_fails[name] += 1
    for name in methods:
        aa[name] = aa_fails[name] / args.aa_runs
    elapsed = time.monotonic() - t0

    scenarios = list(requests["observer"])
    print(f"canary judges on simulated streams: {args.rps:g} req/s total, {args.runs} runs per scenario, "
          f"{args.aa_runs} A/A runs of {args.step_min} min ({elapsed:.0f} s)")
    print(f"{'method':<16}" + "".join(f"{s:>24}" for s in scenarios) + f"{'A/A false-fail':>16}")
    for name in methods:
        cells = []
        for s in scenarios:
            v = requests[name][s]
            cells.append(f"{('—' if v is None else f'{v:,.0f}')} ({detected[name][s]:.0%})")
        print(f"{name:<16}" + "".join(f"{c:>24}" for c in cells) + f"{aa[name]:>16.1%}")
    print("cells: median canary requests to the first Fail (share of runs that failed within "
          f"{args.horizon_min} min)")
    ratios = {s: (requests["fixed_threshold"][s] or math.inf) / (requests["observer"][s] or math.inf)
              for s in scenarios if requests["observer"][s]}
    for s, ratio in ratios.items():
        k = requests["kayenta_style"][s]
        kr = (k / requests["observer"][s]) if k and requests["observer"][s] else math.inf
        print(f"  {s}: fixed_threshold needs {ratio:.2g}× and kayenta_style {kr:.2g}× the requests of observer"
              if math.isfinite(ratio) or math.isfinite(kr) else f"  {s}: only observer detected it")
    print(json.dumps({
        "aa_false_fail_rate": aa["observer"],
        "aa_false_fail_rates": aa,
        "requests_to_fail": requests,
        "detected_share": detected,
        "runs": args.runs,
        "aa_runs": args.aa_runs,
        "total_rps": args.rps,
        "seconds": round(elapsed, 1),
    }, allow_nan=False))


if __name__ == "__main__":
    main()
