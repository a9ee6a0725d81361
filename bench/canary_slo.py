"""The absolute SLO check (observer/analyse/canary/absolute.py) on the traffic models of bench/canary.py: what it
costs a healthy canary, and whether a canary over the objective ever passes.

Per traffic model (iid and the per-pod models of observer_dev.sim.pods), the fleet's own share of TTFT above each
bucket edge and its error share are measured first on long healthy runs of their own seeds. Two SLOs are then set
from them, as a team would after looking at its fleet:

  at objective   the TTFT edge nearest the fleet's p95, objective = 1 − the fleet's share above it (and
                 availability at the fleet's error share): the fleet sits exactly on its SLO, the hardest case
                 for a healthy canary (its point estimate is over the objective about half the time) and for a
                 false fail (its true share is as close to the fail bound as a healthy fleet's can be).
  headroom       the same edges, each allowance twice the fleet's share.

Steps of --step-min minutes at 20 requests/s, looks every minute with the step's planned end given (as the
rendered gates do), the default config with `canary.slo_check` off and on:

  slo_aa_false_fail_by_model   A/A steps whose verdict failed at any look, check on at objective (≤ 1% asked).
  slo_fail_by_check            of those, the ones failed by an SLO check (the rest are the relative tests').
  healthy_pass_within_step     A/A steps that passed at some look: check off, on at objective, on with headroom.
  over_objective_passed        TTFT ×1.5 canaries (over the objective by construction) that passed at some look:
                               check off, and on at objective (0 asked).

    .venv/bin/python -m bench.canary_slo            # 100 A/A and 40 slow steps per model and weight
    .venv/bin/python -m bench.canary_slo --quick    # smoke run
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import time
from dataclasses import dataclass

import numpy as np

from observer.analyse.canary import absolute
from observer.analyse.canary.judge import Outcome
from observer.analyse.canary.verdict import judge
from observer.config.canary import CanarySpec, SLOCheckSpec
from observer_dev.sim import pods
from tests.support.canary_streams import TTFT_EDGES, any_step

MODELS = ("iid", *pods.MODELS)
WEIGHTS = (0.05, 0.25)
RPS = 20.0
LOOK_SECONDS = 60
OFF = CanarySpec()
ON = CanarySpec(slo_check=SLOCheckSpec(enabled=True))
CALIBRATION_SECONDS = 3600
CALIBRATION_RUNS = 4


@dataclass(frozen=True)
class Fleet:
    """The fleet's own shares, from its calibration runs."""

    edge: float
    ttft_share: float
    error_share: float
    slow_share: float
    """A TTFT ×1.5 canary's share above the edge (over the objective where it exceeds ttft_share)."""

    def objectives(self, headroom: float) -> tuple[absolute.Objective, ...]:
        return (absolute.Objective(slo="ttft", allowed=self.ttft_share * headroom, family="ttft",
                                   threshold_seconds=self.edge),
                absolute.Objective(slo="availability", allowed=self.error_share * headroom,
                                   error_reasons=("error",)))


def calibrate(model: str) -> Fleet:
    """The stable arm's TTFT share above the edge nearest its p95, and its error share, on long runs."""
    ttft = np.zeros(len(TTFT_EDGES) + 1)
    errors = total = 0.0
    for i in range(CALIBRATION_RUNS):
        st = any_step(seed=900_000 + i, model=model, seconds=CALIBRATION_SECONDS, total_rps=RPS, weight=0.25)
        ttft += st.baseline.ttft.sum(axis=0)
        errors += float(st.baseline.reasons[:, 3].sum())
        total += float(st.baseline.requests.sum())
    above = 1.0 - np.cumsum(ttft)[:-1] / ttft.sum()  # share above each finite edge
    i = int(np.argmin(np.abs(above - 0.05)))
    slow = np.zeros(len(TTFT_EDGES) + 1)
    for i_run in range(CALIBRATION_RUNS):
        st = any_step(seed=910_000 + i_run, model=model, seconds=CALIBRATION_SECONDS, total_rps=RPS, weight=0.25,
                      canary_ttft_scale=1.5)
        slow += st.canary.ttft.sum(axis=0)
    slow_above = 1.0 - np.cumsum(slow)[:-1] / slow.sum()
    return Fleet(edge=TTFT_EDGES[i], ttft_share=float(above[i]), error_share=errors / total,
                 slow_share=float(slow_above[i]))


@dataclass(frozen=True)
class StepRun:
    model: str
    weight: float
    kind: str  # aa | slow
    failed: dict[str, bool]
    slo_failed: bool
    passed: dict[str, bool]


def run_step(task: tuple[str, float, str, int, int, Fleet]) -> StepRun:
    model, weight, kind, seed, seconds, fleet = task
    step = any_step(seed=seed, model=model, seconds=seconds, total_rps=RPS, weight=weight,
                    canary_ttft_scale=1.5 if kind == "slow" else 1.0)
    arms = {"off": (OFF, ()), "at": (ON, fleet.objectives(1.0)), "headroom": (ON, fleet.objectives(2.0))}
    failed = dict.fromkeys(arms, False)
    passed = dict.fromkeys(arms, False)
    slo_failed = False
    for t, c, b in step.looks(LOOK_SECONDS):
        for name, (spec, objs) in arms.items():
            if failed[name]:  # a fail ends the step; after a pass the gate goes on looking (Argo's count)
                continue
            v = judge(spec, canary="canary", baseline="stable", canary_data=c, baseline_data=b,
                      expected_share=weight, now=float(t), step_seconds=seconds, elapsed_seconds=float(t),
                      objectives=objs)
            if v.verdict is Outcome.FAIL:
                failed[name] = True
                if name == "at":
                    slo_failed = any(r.kind == absolute.KIND and r.outcome is Outcome.FAIL for r in v.metrics)
            passed[name] |= v.verdict is Outcome.PASS
    return StepRun(model=model, weight=weight, kind=kind, failed=failed, slo_failed=slo_failed, passed=passed)


def share(runs: list[StepRun], pick: str, arm: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for m in dict.fromkeys(r.model for r in runs):
        out[m] = {}
        for w in WEIGHTS:
            rs = [r for r in runs if r.model == m and r.weight == w]
            hits = [getattr(r, pick)[arm] if pick != "slo_failed" else r.slo_failed for r in rs]
            out[m][f"{int(w * 100)}pct"] = round(sum(hits) / max(len(rs), 1), 4)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aa-runs", type=int, default=100, help="A/A steps per model and weight")
    ap.add_argument("--slow-runs", type=int, default=40, help="TTFT ×1.5 steps per model and weight")
    ap.add_argument("--step-min", type=int, default=30)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="4 A/A and 2 slow steps of 15 minutes, two models")
    args = ap.parse_args()
    models = tuple(args.models.split(","))
    if args.quick:
        args.aa_runs, args.slow_runs, args.step_min, models = 4, 2, 15, ("iid", "production")
    t0 = time.monotonic()
    with mp.Pool(args.workers) as pool:
        fleets = dict(zip(models, pool.map(calibrate, models), strict=True))
        seconds = args.step_min * 60
        tasks = [(m, w, "aa", 70_000 + i, seconds, fleets[m]) for m in models for w in WEIGHTS
                 for i in range(args.aa_runs)]
        tasks += [(m, w, "slow", 80_000 + i, seconds, fleets[m]) for m in models for w in WEIGHTS
                  for i in range(args.slow_runs)]
        runs = pool.map(run_step, tasks, chunksize=1)
    aa = [r for r in runs if r.kind == "aa"]
    slow = [r for r in runs if r.kind == "slow"]
    for m in models:
        f = fleets[m]
        print(f"{m}: SLO edge {f.edge:g} s, fleet {f.ttft_share:.2%} above it (TTFT ×1.5 canary {f.slow_share:.2%}), "
              f"errors {f.error_share:.2%}")
    out = {
        "slo_aa_false_fail_by_model": share(aa, "failed", "at"),
        "slo_fail_by_check": share(aa, "slo_failed", "at"),
        "aa_false_fail_check_off": share(aa, "failed", "off"),
        "healthy_pass_within_step": {arm: share(aa, "passed", arm) for arm in ("off", "at", "headroom")},
        "over_objective_passed": {arm: share(slow, "passed", arm) for arm in ("off", "at")},
        "fleets": {m: {"edge_s": f.edge, "ttft_share": round(f.ttft_share, 4), "slow_share": round(f.slow_share, 4),
                       "error_share": round(f.error_share, 4)}
                   for m, f in fleets.items()},
        "aa_runs": args.aa_runs, "slow_runs": args.slow_runs, "step_min": args.step_min,
        "seconds": round(time.monotonic() - t0, 1),
    }
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
