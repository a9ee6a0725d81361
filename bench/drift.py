"""Benchmark of embedding drift detection against Evidently's embedding-drift methods, in the same run.

Data: the seeded chatterbot-corpus texts (tests.support.drift_corpus), embedded once with the bundled
all-MiniLM-L6-v2 (this embedding pass is also the throughput measurement). Every trial draws one
(reference, current) pair of n = 500 texts each and hands the SAME vectors to every method.

1. Calibration: false-alarm rate at α = 0.05 over no-drift trials (both samples from one pool).
2. Power: detection rate per shift scenario (10% another domain, 10% another language, 15% re-templated).
   Ours: RBF-MMD permutation test (and the centroid permutation test). Evidently 0.7.23 methods, each
   with its defaults: `model` (its default; bootstrap since n < 1000), `ratio`, `mmd`, `mmd` with
   bootstrap, `distance`. Evidently runs fewer trials (they are slower); the counts are printed.
3. Seconds per test at n = 1,000 / 2,000 / 5,000 per side, d = 384 (ours with 1,000 permutations; the
   Evidently methods at their defaults).
4. Embedding throughput (texts/s): batched (64) vs one text per call, and from the cache.

Usage: python -m bench.drift [--null-trials 300] [--shift-trials 60] [--evidently-null-trials 40]
                             [--evidently-shift-trials 15] [--permutations 500]
Last line: a JSON object with false_alarm_rate, power, evidently, seconds_n2000_1000_permutations,
embed_texts_per_s.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from observer.analyse.drift.mmd import permutation_test
from observer.analyse.embed import load_local_embedder
from tests.support.drift_corpus import SHIFTS, load_corpus

ROOT = Path(__file__).resolve().parents[1]

ALPHA = 0.05
N = 500


def evidently_methods(*, large: bool = False) -> dict[str, Callable[[Any, Any], bool]]:
    """Evidently's embedding-drift methods with their defaults, called as EmbeddingsDriftMetric calls them."""
    import pandas as pd
    from evidently.legacy.metrics.data_drift.embedding_drift_methods import distance, mmd, model, ratio

    # EmbeddingsDriftMetric's default: model(bootstrap=True) below 1,000 reference rows, model() from there.
    methods = {"model": model(bootstrap=not large),
               "ratio": ratio(), "mmd": mmd(), "mmd_bootstrap": mmd(bootstrap=True), "distance": distance()}

    def wrap(method: Any) -> Callable[[Any, Any], bool]:
        def run(ref: np.ndarray, cur: np.ndarray) -> bool:
            return bool(method(pd.DataFrame(cur), pd.DataFrame(ref))[1])
        return run

    return {name: wrap(m) for name, m in methods.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--null-trials", type=int, default=300)
    ap.add_argument("--shift-trials", type=int, default=60)
    ap.add_argument("--evidently-null-trials", type=int, default=40)
    ap.add_argument("--evidently-shift-trials", type=int, default=15)
    ap.add_argument("--permutations", type=int, default=500, help="Permutations per test in trials.")
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    corpus = load_corpus()
    texts = corpus.all_texts()
    with tempfile.TemporaryDirectory() as tmp:
        # -- 4. throughput (and the vectors every trial uses)
        emb = load_local_embedder(cache_dir=tmp, max_cache_entries=len(texts) + 10)
        emb.embed(["warm-up"])  # model load is not throughput
        t0 = time.perf_counter()
        vectors = emb.embed(texts)
        batched = len(texts) / (time.perf_counter() - t0)
        single = load_local_embedder(batch_size=1, max_cache_entries=1000)
        sample = texts[:: max(1, len(texts) // 150)][:150]
        t0 = time.perf_counter()
        for t in sample:
            single.embed([t])
        one_by_one = len(sample) / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        emb.embed(texts)
        cached = len(texts) / (time.perf_counter() - t0)
        emb.close()
    print(f"embedding ({len(texts)} corpus texts, d={vectors.shape[1]}): batched {batched:.0f} texts/s, "
          f"one per call {one_by_one:.0f} texts/s (batched is {batched / one_by_one:.1f}x), "
          f"cached {cached:.0f} texts/s", flush=True)
    index = {t: i for i, t in enumerate(texts)}
    ev = evidently_methods()
    ev_large_model = evidently_methods(large=True)["model"]
    ours: dict[str, Callable[[np.ndarray, np.ndarray, int], bool]] = {
        "mmd_rbf": lambda r, c, s: permutation_test(r, c, permutations=args.permutations, alpha=ALPHA,
                                                    seed=s).drift,
        "centroid": lambda r, c, s: permutation_test(r, c, method="centroid", permutations=args.permutations,
                                                     alpha=ALPHA, seed=s).drift,
    }

    def run(scenario: str, trials: int, ev_trials: int, seed: int) -> tuple[dict[str, float], dict[str, float]]:
        rng = np.random.default_rng(seed)
        hits_ours = dict.fromkeys(ours, 0)
        hits_ev = dict.fromkeys(ev, 0)
        for t in range(trials):
            ref_t, cur_t = corpus.draw(scenario, N, rng)
            ref, cur = vectors[[index[x] for x in ref_t]], vectors[[index[x] for x in cur_t]]
            for name, f in ours.items():
                hits_ours[name] += f(ref, cur, seed * 100_000 + t)
            if t < ev_trials:
                for name, g in ev.items():
                    hits_ev[name] += g(ref, cur)
        return ({k: v / trials for k, v in hits_ours.items()},
                {k: v / max(1, ev_trials) for k, v in hits_ev.items()})

    # -- 1 + 2. calibration and power
    t0 = time.perf_counter()
    far_ours, far_ev = run("none", args.null_trials, args.evidently_null_trials, args.seed)
    power_ours: dict[str, dict[str, float]] = {}
    power_ev: dict[str, dict[str, float]] = {}
    for i, scenario in enumerate(SHIFTS):
        power_ours[scenario], power_ev[scenario] = run(scenario, args.shift_trials, args.evidently_shift_trials,
                                                       args.seed + 1 + i)
    print(f"\ncalibration and power at n={N} per side, alpha={ALPHA} ({time.perf_counter() - t0:.0f} s); "
          f"ours: {args.null_trials} no-drift / {args.shift_trials} per shift trials, {args.permutations} "
          f"permutations; Evidently: {args.evidently_null_trials} / {args.evidently_shift_trials} trials")
    header = f"{'method':<24}{'false alarms':>14}" + "".join(f"{s:>12}" for s in SHIFTS)
    print(header)
    for name in ours:
        print(f"{'observer ' + name:<24}{far_ours[name]:>14.3f}"
              + "".join(f"{power_ours[s][name]:>12.2f}" for s in SHIFTS))
    for name in ev:
        print(f"{'evidently ' + name:<24}{far_ev[name]:>14.3f}"
              + "".join(f"{power_ev[s][name]:>12.2f}" for s in SHIFTS))

    # -- 3. timing
    print("\nseconds per test (d=384; ours with 1,000 permutations; best of 2 at n <= 2,000)")
    rng = np.random.default_rng(args.seed)
    seconds: dict[str, dict[str, float | None]] = {}
    for n in (1000, 2000, 5000):
        ref, cur = vectors[rng.integers(0, len(vectors), n)], vectors[rng.integers(0, len(vectors), n)]
        row: dict[str, float | None] = {}
        reps = 2 if n <= 2000 else 1
        row["observer_mmd_rbf"] = _best(lambda r=ref, c=cur: permutation_test(r, c, permutations=1000), reps)
        row["observer_centroid"] = _best(
            lambda r=ref, c=cur: permutation_test(r, c, method="centroid", permutations=1000), reps)
        for name, g in ev.items():
            if name == "mmd_bootstrap" and n > 1000:
                row["evidently_" + name] = None  # 100 bootstraps of fancy-indexed kernel blocks: minutes
                continue
            if name == "model" and n >= 1000:
                g = ev_large_model  # EmbeddingsDriftMetric's default from 1,000 reference rows: no bootstrap
            row["evidently_" + name] = _best(lambda r=ref, c=cur, g=g: g(r, c), 1)
        seconds[str(n)] = row
        print(f"n={n:<6}" + "  ".join(f"{k}={v:.3f}" for k, v in row.items() if v is not None), flush=True)
    s2000 = seconds["2000"]["observer_mmd_rbf"]
    ev_mmd = seconds["2000"]["evidently_mmd"]
    if s2000 and ev_mmd:
        print(f"n=2000: our permutation MMD (1,000 permutations, a p-value) takes {s2000 / ev_mmd:.2f}x the time "
              "of Evidently's single thresholded MMD (no p-value)")
    print(json.dumps({
        "false_alarm_rate": far_ours["mmd_rbf"],
        "power": {s: power_ours[s]["mmd_rbf"] for s in SHIFTS},
        "centroid": {"false_alarm_rate": far_ours["centroid"],
                     "power": {s: power_ours[s]["centroid"] for s in SHIFTS}},
        "evidently": {name: {"false_alarm_rate": far_ev[name], "power": {s: power_ev[s][name] for s in SHIFTS}}
                      for name in ev},
        "trials": {"ours_null": args.null_trials, "ours_shift": args.shift_trials,
                   "evidently_null": args.evidently_null_trials, "evidently_shift": args.evidently_shift_trials},
        "seconds_n2000_1000_permutations": s2000,
        "seconds": seconds,
        "embed_texts_per_s": round(batched, 1),
        "embed_texts_per_s_one_per_call": round(one_by_one, 1),
        "embed_texts_per_s_cached": round(cached, 1),
    }))


def _best(f: Callable[[], object], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return round(best, 4)


if __name__ == "__main__":
    main()
