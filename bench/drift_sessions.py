"""Drift on conversation traffic: false alarms per window and per 30 days, power, and the cost of one check.

Data: the chatterbot-corpus texts (tests.support.drift_sessions), embedded once with the bundled
all-MiniLM-L6-v2. Traffic: conversations of a fixed number of turns on one topic, each turn near one anchor text
(a user's turns are alike), starting as a Poisson stream at 2,400 samples an hour, turns 45 s apart on average.
A baseline is pinned from a day of it (whole conversations, at most drift.max_baseline_samples samples, its own
windows measured as `observer baseline pin` measures them); a window is the newest drift.max_window_samples
samples of an hour of an independent stream: identical populations, no drift at all.

The prompts field is tested as `observer drift check` tests it (observer.analyse.drift.units: unit-relabelling
RBF-MMD² at drift.alpha, units capped at MAX_UNITS a side), with conversation keys ("keys") or time slices of
drift.slice_seconds only ("slices"), beside the single-sample permutation test the check used before.

    .venv/bin/python -m bench.drift_sessions            # 200 A/A windows a cell, 100 a shift, 30 days
    .venv/bin/python -m bench.drift_sessions --quick    # smoke run
    .venv/bin/python -m bench.drift_sessions --month-only --month-units slices   # the 30 days on time slices

Last line: one JSON object with drift_aa_false_alarm_by_session_turns, drift_false_alarms_per_30_days_aa,
drift_power_by_shift, drift_check_seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import dataclass, replace

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from observer.analyse.drift.baseline import Baseline, BaselineMeta
from observer.analyse.drift.calibrate import Calibration, calibrate
from observer.analyse.drift.check import UNIT_MMD, _relative
from observer.analyse.drift.mmd import median_sq_distance, permutation_test
from observer.analyse.drift.state import DriftReport, DriftResult, DriftState, Persistence
from observer.analyse.drift.units import MAX_UNITS, Units, assign, cap, kernel_sums, mmd_test
from observer.analyse.embed import load_local_embedder
from observer.config.drift import DriftSpec
from tests.support import drift_sessions as ds

SPEC = DriftSpec()
PER_HOUR = 2400.0
DAY = 86_400.0


@dataclass
class Pinned:
    """A baseline as the check sees it: its samples, units, kernel and calibration."""

    stream: ds.Stream
    units: Units
    keep: np.ndarray
    bandwidth: float
    k_rr: np.ndarray
    meta: BaselineMeta


def units_of(s: ds.Stream, mode: str) -> Units:
    keys = [f"c{c}" for c in s.conversation] if mode == "keys" else [None] * len(s.ts)
    return assign(keys, s.ts.tolist(), slice_seconds=SPEC.slice_seconds)


def pin(pools: ds.Pools, rng: np.random.Generator, turns: int, mode: str, *, calibrated: bool = False) -> Pinned:
    day = ds.stream(pools, rng, seconds=DAY, per_hour=PER_HOUR, turns=turns)
    base = ds.whole_units(day, units_of(day, mode).index, SPEC.max_baseline_samples, rng)
    units = units_of(base, mode)
    vectors = pools.vectors[base.rows]
    meta = BaselineMeta(model="m", source_version="stable", since=None, until=None, n=len(base.ts), created_at=0.0,
                        created_by="bench", embedder_model="minilm", embedder_revision="", dim=vectors.shape[1],
                        units=units.kind, unit_count=units.count)
    if calibrated:
        b = Baseline(meta=meta, embeddings={"prompts": vectors}, features={},
                     keys=np.array([f"c{c}" if mode == "keys" else "" for c in base.conversation]), ts=base.ts)
        c = calibrate(b, window_seconds=SPEC.window_seconds, slice_seconds=SPEC.slice_seconds, alpha=SPEC.alpha,
                      feature_alpha=SPEC.feature_alpha, permutations=SPEC.permutations, min_samples=SPEC.min_samples,
                      seed=int(rng.integers(1 << 30)))
        meta = replace(meta, calibration=c.as_json())
    keep = cap(units, MAX_UNITS, SPEC.seed)
    capped = units.subset(keep)
    ref = vectors[keep]
    bandwidth = median_sq_distance(ref, seed=SPEC.seed)
    k_rr = kernel_sums(ref, capped.index, capped.count, ref, capped.index, capped.count, gamma=1 / (2 * bandwidth))
    return Pinned(stream=base, units=capped, keep=keep, bandwidth=bandwidth, k_rr=k_rr, meta=meta)


def check(pools: ds.Pools, b: Pinned, window: ds.Stream, mode: str, seed: int, permutations: int):
    """The prompts field's unit-relabelling test of `window` against `b`."""
    units = units_of(window, mode)
    keep = cap(units, MAX_UNITS, seed)
    return mmd_test(pools.vectors[b.stream.rows][b.keep], b.units, pools.vectors[window.rows][keep],
                    units.subset(keep), sq_bandwidth=b.bandwidth, permutations=permutations, alpha=SPEC.alpha,
                    seed=seed, k_rr=b.k_rr)


def window(pools: ds.Pools, rng: np.random.Generator, turns: int, *, shift: str | None = None) -> ds.Stream:
    return ds.stream(pools, rng, seconds=SPEC.window_seconds, per_hour=PER_HOUR, turns=turns, shift=shift,
                     fraction=0.10 if shift else 0.0, first_id=10**8).between(
        0.0, SPEC.window_seconds, newest=SPEC.max_window_samples)


def aa_grid(pools: ds.Pools, trials: int, per_baseline: int, permutations: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for mode in ("keys", "slices"):
        out[mode] = {}
        for turns in (1, 2, 3, 5, 10):
            rng = np.random.default_rng(1000 * turns + (mode == "slices"))
            hits = 0
            b = pin(pools, rng, turns, mode)
            for i in range(trials):
                if i and i % per_baseline == 0:
                    b = pin(pools, rng, turns, mode)
                hits += check(pools, b, window(pools, rng, turns), mode, i, permutations).p_value < SPEC.alpha
            out[mode][str(turns)] = round(hits / trials, 4)
            print(f"A/A {mode:6s} {turns:2d} turns: {hits}/{trials} windows flagged", flush=True)
    return out


def single_sample(pools: ds.Pools, trials: int, permutations: int) -> dict[str, float]:
    """What the check did before: permuting single samples (the 5,000-sample baseline subsampled per sample)."""
    out: dict[str, float] = {}
    for turns in (1, 2, 5):
        rng = np.random.default_rng(7 + turns)
        day = ds.stream(pools, rng, seconds=DAY, per_hour=PER_HOUR, turns=turns)
        ref = pools.vectors[day.rows[rng.choice(len(day.rows), SPEC.max_baseline_samples, replace=False)]]
        hits = sum(permutation_test(ref, pools.vectors[window(pools, rng, turns).rows], permutations=permutations,
                                    alpha=SPEC.alpha, seed=i).drift for i in range(trials))
        out[str(turns)] = round(hits / trials, 4)
        print(f"A/A single samples {turns:2d} turns: {hits}/{trials}", flush=True)
    return out


def month(pools: ds.Pools, days: int, turns: int, permutations: int, mode: str = "keys") -> dict[str, float]:
    """30 days of checks every drift.interval_seconds over the last window, gated as the service gates them."""
    rng = np.random.default_rng(31)
    b = pin(pools, rng, turns, mode, calibrated=True)
    live = ds.stream(pools, rng, seconds=days * DAY + SPEC.window_seconds, per_hour=PER_HOUR, turns=turns,
                     first_id=10**8)
    state = DriftState(persistence=Persistence(
        interval_seconds=SPEC.interval_seconds, window_seconds=SPEC.window_seconds, alpha=SPEC.alpha,
        feature_alpha=SPEC.feature_alpha, budget=SPEC.false_alarms_per_30_days, min_effect=SPEC.min_effect))
    calibration = Calibration.from_json(b.meta.calibration)
    checks = int(days * DAY / SPEC.interval_seconds)
    shifted = pages = 0
    before = False
    needed = 0
    for j in range(checks):
        end = SPEC.window_seconds + j * SPEC.interval_seconds
        t = check(pools, b, live.between(end - SPEC.window_seconds, end, newest=SPEC.max_window_samples), mode, j,
                  permutations)
        result = DriftResult(field="prompts", statistic=t.statistic, p_value=t.p_value, drift=False,
                             shifted=t.p_value < SPEC.alpha, n_current=0, n_baseline=0, method=UNIT_MMD, status="ok",
                             relative_effect=_relative(t.statistic, calibration, "prompts"))
        gated = state.record(DriftReport(version="v", model="m", checked_at=end, status="ok", baseline_hash="b",
                                         baseline=b.meta, results={"prompts": result})).results["prompts"]
        shifted += result.shifted
        pages += gated.drift and not before
        before, needed = gated.drift, gated.needed
    print(f"{mode}: {days} days, {checks} checks: {shifted} shifted, {pages} false pages (needs {needed} in a row; "
          f"baseline's own windows flagged {b.meta.calibration.get('flagged')} of "
          f"{b.meta.calibration.get('windows')})", flush=True)
    return {"days": days, "checks": checks, "shifted_checks": shifted, "false_pages": pages,
            "false_pages_per_30_days": round(pages * 30 / days, 3), "persistence_windows": needed}


def power(pools: ds.Pools, trials: int, permutations: int) -> dict[str, float]:
    out: dict[str, float] = {}
    rng = np.random.default_rng(77)
    b = pin(pools, rng, 5, "keys")
    for shift in ds.SHIFTS:
        hits = sum(check(pools, b, window(pools, rng, 5, shift=shift), "keys", i, permutations).p_value < SPEC.alpha
                   for i in range(trials))
        out[shift] = round(hits / trials, 3)
        print(f"power, 10% of 5-turn conversations {shift}: {hits}/{trials}", flush=True)
    return out


def timing(pools: ds.Pools) -> dict[str, float]:
    """One check of a 2,000-sample window against a 5,000-sample baseline, both fields (embeddings at hand:
    the embedding cache holds the windows' overlap), with the baseline's own kernel computed (cold) or kept."""
    rng = np.random.default_rng(5)
    b = pin(pools, rng, 5, "keys")
    w = window(pools, rng, 5)
    t0 = time.process_time()
    for f in range(2):
        ref = pools.vectors[b.stream.rows][b.keep]
        kernel_sums(ref, b.units.index, b.units.count, ref, b.units.index, b.units.count, gamma=1 / (2 * b.bandwidth))
        check(pools, b, w, "keys", f, SPEC.permutations)
    cold = time.process_time() - t0
    t0 = time.process_time()
    for f in range(2):
        check(pools, b, w, "keys", f, SPEC.permutations)
    warm = time.process_time() - t0
    print(f"one check, 2 fields, {len(w.ts)} vs {len(b.stream.ts)} samples: {cold:.2f} s CPU cold, {warm:.2f} s "
          "with the baseline's kernel kept", flush=True)
    return {"cold_cpu_seconds": round(cold, 3), "warm_cpu_seconds": round(warm, 3), "window": len(w.ts),
            "baseline": len(b.stream.ts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=200, help="A/A windows per session length and unit kind")
    ap.add_argument("--power-trials", type=int, default=100)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--month-units", choices=("keys", "slices"), default="keys",
                    help="the 30 days' units: conversation keys, or time slices only")
    ap.add_argument("--permutations", type=int, default=SPEC.permutations)
    ap.add_argument("--quick", action="store_true", help="a smoke run: 10 windows a cell, 2 days")
    ap.add_argument("--month-only", action="store_true", help="only the 30 days of checks")
    args = ap.parse_args()
    if args.quick:
        args.trials, args.power_trials, args.days, args.permutations = 10, 10, 2, 199
    t0 = time.time()
    emb = load_local_embedder(cache_dir=ds.cache_dir(), max_cache_entries=100_000)
    pools = ds.build_pools(emb)
    if args.month_only:
        print(json.dumps({"drift_false_alarms_per_30_days_aa": month(pools, args.days, 5, args.permutations,
                                                                     args.month_units),
                          "units": args.month_units, "wall_seconds": round(time.time() - t0)}))
        return
    result = {
        "drift_aa_false_alarm_by_session_turns": aa_grid(pools, args.trials, 20, args.permutations),
        "drift_aa_single_sample_test_by_session_turns": single_sample(pools, max(args.trials // 4, 5),
                                                                      args.permutations),
        "drift_false_alarms_per_30_days_aa": month(pools, args.days, 5, args.permutations, args.month_units),
        "drift_power_by_shift": power(pools, args.power_trials, args.permutations),
        "drift_check_seconds": timing(pools),
        "alpha": SPEC.alpha, "window_samples": SPEC.max_window_samples, "samples_per_hour": PER_HOUR,
        "trials": args.trials, "wall_seconds": round(time.time() - t0),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
