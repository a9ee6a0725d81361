"""How often one non-critical metric alone would end a healthy (A/A) canary step as `fail` — issue #19.

Streams: the seeded iid canary steps of tests/support/canary_streams.py (30-minute steps, 20 req/s, judged
every 30 s as Argo's gate would look), at 5% and 25% weight, default CanarySpec. For each step it records
whether the verdict ever said `fail` (today's rule: a score below marginal fails only with ≥ 2 failed
non-critical metrics), and whether the rule before the fix would have: a look with no critical failure,
a score below marginal and exactly one failed non-critical metric. Last line: one JSON object.

    .venv/bin/python -m bench.canary_score_budget [--steps 200]
"""

from __future__ import annotations

import argparse
import json
import time

from observer.analyse.canary.judge import Outcome
from observer.analyse.canary.verdict import judge
from observer.config.canary import CanarySpec
from tests.support.canary_streams import simulate_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--steps", type=int, default=200, help="seeded A/A steps per weight")
    args = parser.parse_args()
    spec = CanarySpec()
    out: dict[str, object] = {"steps_per_weight": args.steps, "alpha": spec.alpha}
    t0 = time.perf_counter()
    for label, weight in (("5pct", 0.05), ("25pct", 0.25)):
        fails = lone = 0
        for seed in range(args.steps):
            st = simulate_step(seed=50_000 + seed, seconds=1800, total_rps=20, weight=weight)
            step_failed = step_lone = False
            for _, c, b in st.looks(30):
                v = judge(spec, canary="c", baseline="b", canary_data=c, baseline_data=b, expected_share=weight,
                          now=0.0)
                step_failed |= v.verdict is Outcome.FAIL
                scored = [r for r in v.metrics if not r.advisory]
                failed = [r for r in scored if r.outcome is Outcome.FAIL]
                if (not any(r.critical for r in failed) and len(failed) == 1 and v.score < spec.marginal_score
                        and v.split_ok):
                    step_lone = True
            fails += step_failed
            lone += step_lone
        out[f"aa_false_fail_{label}"] = fails / args.steps
        out[f"aa_lone_noncritical_fail_before_fix_{label}"] = lone / args.steps
        print(f"{label}: A/A fail {fails}/{args.steps}; one non-critical metric alone would have failed "
              f"{lone}/{args.steps} steps under the old rule")
    out["seconds"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
