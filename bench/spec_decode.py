"""Speculative decoding as a canary metric (`kind: ratio, spec_decode: true`): rejected ÷ draft tokens judged on
dependent slices (the acceptance drifts ±3% from slice to slice, draft tokens follow each slice's requests), over
seeded trials, at the level users see: the metric's outcome in the verdict. Stable accepts 70% of draft tokens.

    .venv/bin/python -m bench.spec_decode [--trials 200]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from tests.support.spec_decode_streams import spec_outcome as _outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=200)
    args = parser.parse_args()
    out: dict[str, float] = {}
    for label, acceptance in (("same", 0.70), ("slightly_worse", 0.67), ("worse", 0.60)):
        counts = Counter(str(_outcome(seed, acceptance)) for seed in range(args.trials))
        print(f"canary accepts {acceptance:.0%}: {dict(counts)}")
        out[f"{label}_fail_rate"] = counts["fail"] / args.trials
        out[f"{label}_pass_rate"] = counts["pass"] / args.trials
    print(json.dumps({"trials": args.trials, **out}))


if __name__ == "__main__":
    main()
