"""The offline gate: a candidate against stable on the golden sets, before a canary starts.

Both versions answer the same golden items, so the comparison is paired by item. Per set and over all sets:

* **fail** when the candidate is significantly worse: the exact one-sided McNemar test on the discordant
  items (candidate failed where stable passed, vs the reverse) at `alpha`;
* **pass** when it is non-inferior: the lower one-sided (1 − `alpha`) bound of the paired pass-rate
  difference is above −`margin` (smoothed Wald on the discordant counts, so a set without discordant items
  still needs enough items to be sure);
* **inconclusive** otherwise (too few items to tell), and when an arm scored nothing.

Items either arm left unscored (request or judge errors) are excluded from the pairs and counted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from observer.analyse.quality.model import GoldenRunResult


class GateOutcome(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


EXIT_CODES: dict[GateOutcome, int] = {GateOutcome.PASS: 0, GateOutcome.FAIL: 1, GateOutcome.INCONCLUSIVE: 3}
"""Exit codes of `observer eval gate` (2 stays the usage-error code of the CLI; 4: nothing could be scored)."""


@dataclass(frozen=True)
class Comparison:
    """One golden set (or all of them) compared item by item."""

    golden_set: str
    pairs: int
    candidate_passed: int
    baseline_passed: int
    losses: int  # the candidate failed where stable passed
    wins: int
    unpaired: int  # items unscored in one arm or both (request or judge errors)
    difference: float | None
    low: float | None
    high: float | None
    p_value: float
    outcome: GateOutcome
    reason: str

    def body(self) -> dict[str, Any]:
        def r(x: float | None) -> float | None:
            return None if x is None else round(x, 4)

        return {"golden_set": self.golden_set, "outcome": str(self.outcome), "pairs": self.pairs,
                "candidate_passed": self.candidate_passed, "baseline_passed": self.baseline_passed,
                "losses": self.losses, "wins": self.wins, "unpaired": self.unpaired,
                "difference": r(self.difference), "ci": [r(self.low), r(self.high)],
                "p_value": float(f"{self.p_value:.4g}"), "reason": self.reason}


def compare(name: str, candidate: Sequence[GoldenRunResult], baseline: Sequence[GoldenRunResult], *,
            alpha: float, margin: float) -> Comparison:
    """Compare the candidate's and stable's results on the same golden set(s), paired by (set, item id)."""
    from scipy import stats as sps

    def scored(runs: Sequence[GoldenRunResult]) -> dict[tuple[str, str], bool]:
        return {(r.golden_set, i.item_id): i.passed for r in runs for i in r.items if i.scored}

    c, b = scored(candidate), scored(baseline)
    every = {(r.golden_set, i.item_id) for runs in (candidate, baseline) for r in runs for i in r.items}
    keys = sorted(set(c) & set(b))
    n = len(keys)
    losses = sum(1 for k in keys if b[k] and not c[k])
    wins = sum(1 for k in keys if c[k] and not b[k])
    cp, bp = sum(1 for k in keys if c[k]), sum(1 for k in keys if b[k])
    if n == 0:
        return Comparison(name, 0, 0, 0, 0, 0, len(every), None, None, None, 1.0, GateOutcome.INCONCLUSIVE,
                          "no item was scored by both versions (request or judge errors)")
    d = (wins - losses) / n
    p = float(sps.binomtest(losses, losses + wins, 0.5, alternative="greater").pvalue) if losses + wins else 1.0
    lo_b, lo_c = losses + 0.5, wins + 0.5  # smoothed, so no discordance still leaves a width of ~1/n
    var = max((lo_b + lo_c - (lo_c - lo_b) ** 2 / n) / (n * n), 0.0)
    z = float(sps.norm.ppf(1.0 - alpha))
    low, high = max(-1.0, d - z * math.sqrt(var)), min(1.0, d + z * math.sqrt(var))
    if p < alpha:
        outcome = GateOutcome.FAIL
        reason = (f"the candidate failed {losses} item(s) stable passed and passed {wins} stable failed: "
                  f"significantly worse (McNemar p={p:.2g} < {alpha:g})")
    elif low > -margin:
        outcome = GateOutcome.PASS
        reason = f"non-inferior: the pass-rate difference is at least {low:+.3f} > −{margin:g}"
    else:
        outcome = GateOutcome.INCONCLUSIVE
        reason = (f"not enough evidence: the pass-rate difference could be as low as {low:+.3f} "
                  f"(margin −{margin:g}) on {n} paired item(s)")
    return Comparison(name, n, cp, bp, losses, wins, len(every) - n, d, low, high, p, outcome, reason)


def gate(candidate: Sequence[GoldenRunResult], baseline: Sequence[GoldenRunResult], *, alpha: float,
         margin: float) -> tuple[GateOutcome, list[Comparison]]:
    """Per-set comparisons and the overall one; the gate's outcome is the overall one, except that any set
    that is significantly worse on its own fails the gate too. The false-fail budget `alpha` is split: half
    for the overall test, half over the sets (Bonferroni)."""
    sets = sorted({r.golden_set for r in (*candidate, *baseline)})
    per_set = [compare(s, [r for r in candidate if r.golden_set == s], [r for r in baseline if r.golden_set == s],
                       alpha=alpha / (2 * max(len(sets), 1)), margin=margin) for s in sets]
    overall = compare("", candidate, baseline, alpha=alpha / 2, margin=margin)
    outcome = overall.outcome
    if any(c.outcome is GateOutcome.FAIL for c in per_set):
        outcome = GateOutcome.FAIL
    return outcome, [overall, *per_set]
