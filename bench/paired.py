"""Paired shadow comparison vs the unpaired quality comparison (issue #16), with a scripted judge.

The world (seeded): prompts arrive in sessions of related prompts (geometric, mean 8: one user's topic), each
session easy (a good answer 95% of the time) or hard (40%). A canary "worse on X% of prompts" fails on the
prompts of X% of the sessions (worse on a topic, not at random); elsewhere it answers as well as stable.

* **Paired** (shadow replay): each stable prompt is answered by both arms; the scripted pairwise judge is
  asked in both orders (`observer.analyse.quality.pairwise.combine`); the canary judge's `paired` metric
  (`judge_metric`, the sequential sign test) looks every 10 pairs. Samples = pairs (one canary replay each;
  with `baseline: replay` also one stable replay and two judge calls per pair).
* **Unpaired**: each arm is judged pointwise on its own traffic (different prompts, equal sample counts per
  arm); the canary judge's unpaired metrics look every 10 samples: the live-check failure ratio
  (`kind: ratio`, the exact conditional sequential test) and the golden pass-rate non-inferiority
  (`kind: quality`); the first of the two to fail counts. Samples = canary samples judged.

The scripted judges: pointwise flips a verdict with probability NOISE; pairwise picks the truth (the passing
answer, or a tie) except with probability BIAS it names the answer shown first and with probability NOISE it
picks 1, 2 or tie at random. Every test runs at the same α (one critical metric's step budget).

    .venv/bin/python -m bench.paired [--trials 200] [--aa-steps 400]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import yaml
from scipy import stats as sps

from observer.analyse.canary.judge import ArmData, Outcome, PairCounts, judge_metric
from observer.analyse.quality.pairwise import combine, position_pick
from observer.analyse.quality.prompts import load_prompt, load_rubrics, render_pair
from observer.config.canary import CanaryMetricSpec
from tests.support.judge_server import rule_preference

ROOT = Path(__file__).resolve().parents[1]
ALPHA = 0.01
NOISE = 0.10
BIAS = 0.20
LOOK_EVERY = 10
MAX_N = 3000
PAIRED = CanaryMetricSpec(name="paired_judge", kind="paired", paired_check="judge", critical=True)
RATIO = CanaryMetricSpec(name="judge_fail", kind="ratio", live_check="judge", critical=True, base_rate=0.2)
GOLDEN = CanaryMetricSpec(name="golden", kind="quality", critical=True, expected_pass_rate=0.8)


def sessions(rng: np.random.Generator, n: int, worse_share: float) -> tuple[np.ndarray, np.ndarray]:
    """(stable pass probability, canary worse?) per prompt, in sessions of related prompts."""
    p = np.empty(n)
    worse = np.zeros(n, dtype=bool)
    i = 0
    while i < n:
        k = min(int(rng.geometric(1 / 8)), n - i)
        p[i:i + k] = 0.95 if rng.random() < 0.7 else 0.4
        worse[i:i + k] = rng.random() < worse_share
        i += k
    return p, worse


def answers(rng: np.random.Generator, p: np.ndarray, worse: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Whether each arm's answer is good (canary: never on its worse prompts)."""
    good_s = rng.random(len(p)) < p
    good_c = (rng.random(len(p)) < p) & ~worse
    return good_s, good_c


def pick(rng: np.random.Generator, first_good: np.ndarray, second_good: np.ndarray, *, bias: float) -> np.ndarray:
    """One judge order: 1, 2 or 0 (tie) per pair."""
    truth = np.where(first_good == second_good, 0, np.where(first_good, 1, 2))
    u = rng.random(len(truth))
    noisy = rng.integers(0, 3, len(truth))
    return np.where(u < bias, 1, np.where(u < bias + NOISE, noisy, truth))


def sides(first_is_baseline: bool, picks: np.ndarray) -> list[str]:
    first, second = ("baseline", "canary") if first_is_baseline else ("canary", "baseline")
    return ["tie" if x == 0 else first if x == 1 else second for x in picks]


def pair_outcomes(rng: np.random.Generator, good_s: np.ndarray, good_c: np.ndarray, *, bias: float,
                  both_orders: bool = True) -> tuple[list[str], list[int | None]]:
    a = sides(True, pick(rng, good_s, good_c, bias=bias))
    if not both_orders:
        return [{"canary": "win", "baseline": "loss", "tie": "tie"}[x] for x in a], []
    b = sides(False, pick(rng, good_c, good_s, bias=bias))
    pairs = list(zip(a, b, strict=True))
    return [combine(x, y) for x, y in pairs], [position_pick(x, y) for x, y in pairs]  # type: ignore[arg-type]


def paired_to_fail(outcomes: list[str]) -> int | None:
    wins = losses = ties = inc = 0
    for i, o in enumerate(outcomes, start=1):
        wins += o == "win"
        losses += o == "loss"
        ties += o == "tie"
        inc += o == "inconsistent"
        if i % LOOK_EVERY == 0:
            r = judge_metric(PAIRED, ArmData(paired={"judge": PairCounts(wins, losses, ties, inc)}), ArmData(),
                             alpha=ALPHA, power=0.8)
            if r.outcome is Outcome.FAIL:
                return i
    return None


def unpaired_to_fail(pass_c: np.ndarray, pass_b: np.ndarray,
                     metrics: tuple[CanaryMetricSpec, ...] = (RATIO, GOLDEN)) -> int | None:
    cc, cb = np.cumsum(pass_c), np.cumsum(pass_b)
    for n in range(LOOK_EVERY, len(pass_c) + 1, LOOK_EVERY):
        pc, pb = int(cc[n - 1]), int(cb[n - 1])
        c = ArmData(live_checks={"judge": (n - pc, n)}, golden={"": (pc, n)})
        b = ArmData(live_checks={"judge": (n - pb, n)}, golden={"": (pb, n)})
        if any(judge_metric(m, c, b, alpha=ALPHA, power=0.8).outcome is Outcome.FAIL for m in metrics):
            return n
    return None


def pointwise(rng: np.random.Generator, good: np.ndarray) -> np.ndarray:
    return good ^ (rng.random(len(good)) < NOISE)


def median(xs: list[int | None]) -> float:
    return float(np.median([MAX_N if x is None else x for x in xs]))


def scenario(worse_share: float, trials: int, seed: int) -> tuple[float, dict[str, float], float, float]:
    """Median samples to fail: paired, and each unpaired metric alone (each a test at α)."""
    rng = np.random.default_rng(seed)
    paired: list[int | None] = []
    unpaired: dict[str, list[int | None]] = {"live_ratio": [], "golden": []}
    for _ in range(trials):
        p, worse = sessions(rng, MAX_N, worse_share)
        good_s, good_c = answers(rng, p, worse)
        paired.append(paired_to_fail(pair_outcomes(rng, good_s, good_c, bias=0.0)[0]))
        # Unpaired: each arm on its own prompts (the baseline's stream is independent of the canary's).
        pb, wb = sessions(rng, MAX_N, 0.0)
        pc, wc = sessions(rng, MAX_N, worse_share)
        pass_c, pass_b = pointwise(rng, answers(rng, pc, wc)[1]), pointwise(rng, answers(rng, pb, wb)[0])
        unpaired["live_ratio"].append(unpaired_to_fail(pass_c, pass_b, (RATIO,)))
        unpaired["golden"].append(unpaired_to_fail(pass_c, pass_b, (GOLDEN,)))
    best = min(unpaired, key=lambda k: median(unpaired[k]))
    never = (sum(x is None for x in paired) / trials, sum(x is None for x in unpaired[best]) / trials)
    return median(paired), {k: median(v) for k, v in unpaired.items()}, never[0], never[1]


def aa_false_fail(steps: int, seed: int, *, pairs: int, bias: float, both_orders: bool) -> float:
    rng = np.random.default_rng(seed)
    fails = 0
    for _ in range(steps):
        p, worse = sessions(rng, pairs, 0.0)
        good_s, good_c = answers(rng, p, worse)
        out = pair_outcomes(rng, good_s, good_c, bias=bias, both_orders=both_orders)[0]
        fails += paired_to_fail(out) is not None
    return fails / steps


def unpaired_aa(steps: int, seed: int, *, n: int, metrics: tuple[CanaryMetricSpec, ...]) -> float:
    rng = np.random.default_rng(seed)
    fails = 0
    for _ in range(steps):
        pb, wb = sessions(rng, n, 0.0)
        pc, wc = sessions(rng, n, 0.0)
        fails += unpaired_to_fail(pointwise(rng, answers(rng, pc, wc)[1]),
                                  pointwise(rng, answers(rng, pb, wb)[0]), metrics) is not None
    return fails / steps


def swap_effect(seed: int, n: int = 20_000) -> dict[str, object]:
    """The 20%-biased judge on the 10%-worse canary: errors against the truth, and whether the bias shows."""
    rng = np.random.default_rng(seed)
    p, worse = sessions(rng, n, 0.10)
    good_s, good_c = answers(rng, p, worse)
    truth = np.where(good_s == good_c, "tie", np.where(good_c, "win", "loss"))
    swapped, _ = pair_outcomes(rng, good_s, good_c, bias=BIAS)
    single, _ = pair_outcomes(rng, good_s, good_c, bias=BIAS, both_orders=False)
    as_tie = ["tie" if o == "inconsistent" else o for o in swapped]
    out: dict[str, object] = {
        "swap_corrected_error_rate": round(float(np.mean([a != t for a, t in zip(as_tie, truth, strict=True)])), 4),
        "single_order_error_rate": round(float(np.mean([a != t for a, t in zip(single, truth, strict=True)])), 4),
        "single_order_false_losses": round(float(np.mean([a == "loss" and t != "loss"
                                                          for a, t in zip(single, truth, strict=True)])), 4),
        "swap_corrected_false_losses": round(float(np.mean([a == "loss" and t != "loss"
                                                            for a, t in zip(as_tie, truth, strict=True)])), 4),
        "position_inconsistent_share": round(float(np.mean([o == "inconsistent" for o in swapped])), 4)}
    for label, bias in (("", BIAS), ("_unbiased_judge", 0.0)):
        r2 = np.random.default_rng(seed + 1)
        _, pos = pair_outcomes(r2, good_s[:300], good_c[:300], bias=bias)
        first, second = sum(x == 1 for x in pos), sum(x == 2 for x in pos)
        pv = float(sps.binomtest(first, first + second, 0.5, alternative="greater").pvalue) if first + second else 1.0
        out[f"position_bias_detected{label}"] = pv < ALPHA
        out[f"position_bias_p{label}"] = float(f"{pv:.3g}")
    return out


def injections() -> dict[str, int]:
    """The injection corpus (pointwise + pairwise attacks) planted in the worse answer, both positions, against
    the gullible scripted judge reading the client's fenced rendering: outcomes that changed."""
    corpus = yaml.safe_load((ROOT / "evals" / "injections.yaml").read_text())
    attacks = corpus["attacks"] + corpus["pairwise_attacks"]
    prompt = load_prompt(ROOT / "evals" / "pairwise_prompt.yaml")
    rubric = load_rubrics(ROOT / "evals" / "rubrics")["correctness"]
    good, bad = "The capital is Paris.", "The capital is Lyon."

    def outcome(baseline: str, canary: str) -> str:
        picks = []
        for first, second, first_side, second_side in ((baseline, canary, "baseline", "canary"),
                                                       (canary, baseline, "canary", "baseline")):
            _, user = render_pair(prompt, rubric, nonce="0123456789abcdef01234567", judged_prompt="Capital of "
                                  "France?", first=first, second=second, reference="Paris")
            b = rule_preference(user)["better"]
            picks.append("tie" if b == "tie" else first_side if b == "1" else second_side)
        return combine(picks[0], picks[1])  # type: ignore[arg-type]

    clean = outcome(good, bad)
    changed = sum(outcome(good, bad + a["text"].replace("{answer}", bad)) != clean for a in attacks)
    return {"injection_attempts": len(attacks), "injection_verdicts_changed": changed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trials", type=int, default=200, help="seeded canary steps per worse scenario")
    parser.add_argument("--aa-steps", type=int, default=400, help="seeded A/A steps (each up to --aa-pairs pairs)")
    parser.add_argument("--aa-pairs", type=int, default=1000, help="pairs per A/A step (looks every 10)")
    args = parser.parse_args()
    t0 = time.perf_counter()
    out: dict[str, object] = {"alpha": ALPHA, "judge_noise": NOISE, "judge_position_bias": BIAS,
                              "look_every": LOOK_EVERY, "max_samples": MAX_N}
    paired: dict[str, float] = {}
    unpaired: dict[str, float] = {}
    by_metric: dict[str, dict[str, float]] = {}
    for label, share in (("10pct_worse", 0.10), ("20pct_worse", 0.20)):
        p, us, pn, un = scenario(share, args.trials, seed=1600 + int(share * 100))
        u = min(us.values())  # the better unpaired test, each alone at α
        paired[label], unpaired[label], by_metric[label] = p, u, us
        print(f"{label}: median samples to a correct fail — paired {p:g} pairs, unpaired {u:g} canary samples "
              f"({u / p:.1f}×; live-check ratio {us['live_ratio']:g}, golden non-inferiority {us['golden']:g}); "
              f"never failed within {MAX_N}: paired {pn:.0%}, unpaired {un:.0%}")
    out["paired_pairs_to_fail"] = paired
    out["unpaired_samples_to_fail"] = unpaired
    out["unpaired_samples_to_fail_by_metric"] = by_metric
    out["unpaired_over_paired"] = {k: round(unpaired[k] / paired[k], 2) for k in paired}
    out["aa_steps"] = args.aa_steps
    out["aa_pairs_per_step"] = args.aa_pairs
    out["aa_false_fail_rate"] = aa_false_fail(args.aa_steps, 7, pairs=args.aa_pairs, bias=BIAS, both_orders=True)
    out["single_order_aa_false_fail_rate"] = aa_false_fail(args.aa_steps, 8, pairs=args.aa_pairs, bias=BIAS,
                                                           both_orders=False)
    steps = max(50, args.aa_steps // 2)
    out["unpaired_aa_false_fail_rate"] = unpaired_aa(steps, 9, n=args.aa_pairs, metrics=(RATIO, GOLDEN))
    out["unpaired_aa_false_fail_rate_live_ratio"] = unpaired_aa(steps, 9, n=args.aa_pairs, metrics=(RATIO,))
    out["unpaired_aa_false_fail_rate_golden"] = unpaired_aa(steps, 9, n=args.aa_pairs, metrics=(GOLDEN,))
    print(f"A/A over {args.aa_steps} steps of {args.aa_pairs} pairs, judge biased {BIAS:.0%} to position 1: "
          f"paired (both orders) false-fail {out['aa_false_fail_rate']:.3f}, single order "
          f"{out['single_order_aa_false_fail_rate']:.3f}; unpaired on session traffic "
          f"{out['unpaired_aa_false_fail_rate']:.3f}")
    out.update(swap_effect(11))
    print(f"swap: error vs truth {out['swap_corrected_error_rate']} (both orders) vs "
          f"{out['single_order_error_rate']} (one order); false losses {out['swap_corrected_false_losses']} vs "
          f"{out['single_order_false_losses']}; bias detected {out['position_bias_detected']} "
          f"(unbiased judge: {out['position_bias_detected_unbiased_judge']})")
    out.update(injections())
    print(f"injections: {out['injection_verdicts_changed']} of {out['injection_attempts']} pair outcomes changed")
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
