"""Benchmark of the drift gate: the canary's texts against the baseline's in the same window (a two-sample MMD
permutation test between the arms), on traffic that looks like production.

Data: the seeded chatterbot-corpus texts (tests.support.drift_corpus), embedded once with the bundled
all-MiniLM-L6-v2. Traffic: users' sessions, each on one topic (one of the corpus's English categories) and a
handful of turns, living in one time slice of the window; the canary receives `weight` of the sessions. Texts of
a session are alike, so the samples are dependent within a session — as in production.

Per trial the canary's and the baseline's window samples (the baseline capped at drift.max_window_samples) are
tested at alpha = drift.alpha three ways: permuting single samples (what a two-sample test assumes), permuting
whole (arm, slice) blocks, and the gate's test (observer.analyse.drift.arms: per-slice differences of the mean
embedding and of kNN novelty, slice signs flipped). A/A: both arms from the same traffic; power: the canary's texts
mixed with another pool as bench/drift.py's shifts (10% another domain, 10% another language, 15% templated).

Usage: python -m bench.drift_gate [--trials 300] [--shift-trials 100] [--weight 0.05] [--permutations 199]
Then the gate on one A/A stream of sessions checked every 15 minutes over the last 30 (overlapping windows, as
the area runs): the share of checks shifted, and flagged as drift after `drift.consecutive: 2`.

Last line: a JSON object with aa_false_alarm (per method), gate_aa_stream (shifted, drift), power (per method
and shift), trials, weight.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from collections.abc import Mapping

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from observer.analyse.drift.arms import arms_test
from observer.analyse.drift.mmd import median_sq_distance, mmd2_unbiased_many, permutation_test
from observer.analyse.embed import load_local_embedder
from tests.support.drift_corpus import SCENARIOS, SHIFTS, _data_dir, _turns, load_corpus

ALPHA = 0.01  # drift.alpha's default
WINDOW_SLICES = 30  # a 30-minute step in 60-second slices
SESSIONS = 900  # sessions in the window (about 3,600 requests)
TURNS = 4.0  # mean turns per session (geometric)
BASELINE_CAP = 1000  # drift.max_window_samples' order of magnitude


def topics() -> dict[str, list[str]]:
    """The corpus's English categories, each a topic sessions stay on (its texts within the general pool)."""
    general = set(load_corpus().pools["general"])
    out: dict[str, list[str]] = {}
    for path in sorted((_data_dir() / "english").glob("*.yml")):
        texts = sorted(set(_turns(path)) & general)
        if len(texts) >= 10:
            out[path.stem] = texts
    return out


def traffic(rng: np.random.Generator, by_topic: Mapping[str, list[str]], weight: float
            ) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """(canary, baseline) lists of (text, slice) for one window of sessions."""
    names = sorted(by_topic)
    sizes = np.array([len(by_topic[n]) for n in names], dtype=float)
    canary: list[tuple[str, int]] = []
    baseline: list[tuple[str, int]] = []
    for _ in range(SESSIONS):
        topic = by_topic[names[rng.choice(len(names), p=sizes / sizes.sum())]]
        turns = int(rng.geometric(1.0 / TURNS))
        at = int(rng.integers(0, WINDOW_SLICES))
        arm = canary if rng.random() < weight else baseline
        arm.extend((topic[int(rng.integers(0, len(topic)))], at) for _ in range(turns))
    if len(baseline) > BASELINE_CAP:
        keep = np.sort(rng.choice(len(baseline), BASELINE_CAP, replace=False))
        baseline = [baseline[i] for i in keep]
    return canary, baseline


def persistence(rng: np.random.Generator, by_topic: Mapping[str, list[str]], vec: Mapping[str, np.ndarray],
                weight: float, checks: int, flips: int) -> tuple[float, float]:
    """(per-check shifted rate, per-check drift rate after `drift.consecutive: 2`) of the gate on one A/A stream
    of sessions, checked every 15 minutes over the last 30 (the windows overlap by half, as the area's do)."""
    names = sorted(by_topic)
    sizes = np.array([len(by_topic[n]) for n in names], dtype=float)
    per_minute = SESSIONS // WINDOW_SLICES
    stream: list[tuple[str, int, bool]] = []  # (text, minute, canary)
    for minute in range(15 * checks + WINDOW_SLICES):
        for _ in range(per_minute):
            topic = by_topic[names[rng.choice(len(names), p=sizes / sizes.sum())]]
            to_canary = bool(rng.random() < weight)
            stream.extend((topic[int(rng.integers(0, len(topic)))], minute, to_canary)
                          for _ in range(int(rng.geometric(1.0 / TURNS))))
    minutes = np.array([m for _, m, _ in stream])
    shifted_checks = flagged = 0
    before = False
    for j in range(checks):
        start = 15 * j
        rows = np.nonzero((minutes >= start) & (minutes < start + WINDOW_SLICES))[0]
        canary = [stream[i] for i in rows if stream[i][2]]
        baseline = [stream[i] for i in rows if not stream[i][2]]
        if len(baseline) > BASELINE_CAP:
            baseline = [baseline[i] for i in np.sort(rng.choice(len(baseline), BASELINE_CAP, replace=False))]
        r = arms_test(np.stack([vec[t] for t, _, _ in baseline]), [m - start for _, m, _ in baseline],
                      np.stack([vec[t] for t, _, _ in canary]), [m - start for _, m, _ in canary], flips=flips, seed=j)
        now = r is not None and r.p_value < ALPHA
        shifted_checks += now
        flagged += now and before
        before = now
    return shifted_checks / checks, flagged / checks


def shifted(rng: np.random.Generator, canary: list[tuple[str, int]], shift: str) -> list[tuple[str, int]]:
    """The canary's texts with `fraction` of them replaced by the shift's pool (slices kept)."""
    sc = SCENARIOS[shift]
    assert sc.other is not None
    other = load_corpus().pools[sc.other]
    out = list(canary)
    for i in rng.choice(len(out), round(sc.fraction * len(out)), replace=False):
        out[i] = (other[int(rng.integers(0, len(other)))], out[i][1])
    return out


def test(vec: Mapping[str, np.ndarray], canary: list[tuple[str, int]], baseline: list[tuple[str, int]],
         permutations: int, seed: int) -> dict[str, bool]:
    ref = np.stack([vec[t] for t, _ in baseline])
    cur = np.stack([vec[t] for t, _ in canary])
    naive = permutation_test(ref, cur, permutations=permutations, alpha=ALPHA, seed=seed)
    blocked = block_mmd(ref, [s for _, s in baseline], cur, [s for _, s in canary], permutations, seed)
    gate = arms_test(ref, [b for _, b in baseline], cur, [c for _, c in canary], flips=permutations, seed=seed)
    return {"samples": naive.drift, "slices": blocked < ALPHA, "gate": gate is not None and gate.p_value < ALPHA}


def block_mmd(ref: np.ndarray, ref_slices: list[int], cur: np.ndarray, cur_slices: list[int],
              permutations: int, seed: int) -> float:
    """p-value of the RBF-MMD test relabelling whole (arm, slice) blocks instead of single samples: as many
    blocks go to the reference as it has."""
    keys = [("r", b) for b in ref_slices] + [("c", b) for b in cur_slices]
    ids = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    row_block = np.array([ids[k] for k in keys])
    n_ref_blocks = len({k for k in keys if k[0] == "r"})
    rng = np.random.default_rng(seed)
    chosen = np.zeros((permutations + 1, len(ids)), dtype=np.float32)
    chosen[0, :n_ref_blocks] = 1.0
    for j in range(1, permutations + 1):
        chosen[j, rng.choice(len(ids), n_ref_blocks, replace=False)] = 1.0
    a = np.ascontiguousarray(chosen[:, row_block].T)
    z = np.ascontiguousarray(np.vstack([ref, cur]))
    sizes = a.sum(axis=0)
    keep = (sizes >= 2) & (len(z) - sizes >= 2)  # a relabelling leaving an arm one point is no draw
    keep[0] = True
    a = np.ascontiguousarray(a[:, keep])
    stats = mmd2_unbiased_many(z, a, gamma=1.0 / (2.0 * median_sq_distance(ref, seed=seed)))
    return float((1 + np.count_nonzero(stats[1:] >= stats[0] - 1e-12 * max(1.0, abs(stats[0])))) / len(stats))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--shift-trials", type=int, default=100)
    ap.add_argument("--weight", type=float, default=0.05)
    ap.add_argument("--permutations", type=int, default=199)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--checks", type=int, default=600, help="checks of the A/A stream for the persistence rate")
    args = ap.parse_args()
    corpus = load_corpus()
    by_topic = topics()
    texts = corpus.all_texts()
    with tempfile.TemporaryDirectory() as tmp:
        emb = load_local_embedder(cache_dir=tmp, max_cache_entries=len(texts) + 10)
        vectors = emb.embed(texts)
    vec = {t: np.asarray(v, dtype=np.float32) for t, v in zip(texts, vectors, strict=True)}
    rng = np.random.default_rng(args.seed)
    aa = {"samples": 0, "slices": 0, "gate": 0}
    sizes: list[int] = []
    for i in range(args.trials):
        canary, baseline = traffic(rng, by_topic, args.weight)
        sizes.append(len(canary))
        for k, hit in test(vec, canary, baseline, args.permutations, seed=i).items():
            aa[k] += hit
    power: dict[str, dict[str, float]] = {"samples": {}, "slices": {}, "gate": {}}
    for shift in SHIFTS:
        hits = {"samples": 0, "slices": 0, "gate": 0}
        for i in range(args.shift_trials):
            canary, baseline = traffic(rng, by_topic, args.weight)
            for k, hit in test(vec, shifted(rng, canary, shift), baseline, args.permutations, seed=10_000 + i).items():
                hits[k] += hit
        for k in hits:
            power[k][shift] = round(hits[k] / args.shift_trials, 3)
    rates = {k: round(n / args.trials, 4) for k, n in aa.items()}
    stream_shifted, stream_drift = persistence(rng, by_topic, vec, args.weight, args.checks, args.permutations)
    print(f"A/A false alarms at alpha {ALPHA} over {args.trials} windows (canary {np.median(sizes):.0f} samples "
          f"median at weight {args.weight:g}): single-sample permutation {rates['samples']:.2%}, "
          f"slice-block permutation {rates['slices']:.2%}, the gate (slice sign-flips) {rates['gate']:.2%}")
    print(f"the gate on an A/A stream of {args.checks} checks (every 15 min over the last 30): shifted "
          f"{stream_shifted:.2%} of checks, drift after two in a row {stream_drift:.2%}")
    for k in ("samples", "slices", "gate"):
        print(f"power ({k}): " + ", ".join(f"{s} {p:.0%}" for s, p in power[k].items()))
    print(json.dumps({"aa_false_alarm": rates, "gate_aa_stream": {"shifted": round(stream_shifted, 4),
                                                                   "drift": round(stream_drift, 4)},
                      "power": power, "trials": args.trials,
                      "shift_trials": args.shift_trials, "weight": args.weight, "alpha": ALPHA,
                      "canary_samples_median": float(np.median(sizes))}))


if __name__ == "__main__":
    main()
