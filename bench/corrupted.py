"""Requests with NaNs in their logits as a canary metric (`kind: ratio, corrupted: true`): corrupted ÷ finished
requests judged on dependent slices (the rate varies log-normally, σ 0.5, from slice to slice), over seeded
trials, at the level users see: the metric's outcome in the verdict.

    .venv/bin/python -m bench.corrupted [--trials 200]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from tests.support.corrupted_streams import corrupted_outcome as _outcome

ARMS = (("clean", 0.0, 0.0), ("rare_equal", 0.002, 0.002), ("rare_worse", 0.005, 0.002), ("broken", 0.02, 0.0))
"""(label, canary rate, stable rate)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=200)
    args = parser.parse_args()
    out: dict[str, float] = {}
    for label, canary, stable in ARMS:
        counts = Counter(str(_outcome(seed, canary, stable)) for seed in range(args.trials))
        print(f"canary {canary:.1%} corrupted, stable {stable:.1%}: {dict(counts)}")
        for outcome in ("fail", "pass", "inconclusive"):
            out[f"{label}_{outcome}_rate"] = counts[outcome] / args.trials
    print(json.dumps({"trials": args.trials, **out}))


if __name__ == "__main__":
    main()
