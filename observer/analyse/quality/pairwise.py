"""Paired comparison of two answers to the same prompt: the pairwise judge (both orders) and paired rule checks.

The judge is asked which answer is better twice, once with the baseline's answer first and once with the
canary's first. A pair is decided only when both orders name the same answer; orders that disagree are a
tie, counted apart as *position-inconsistent* (a judge that prefers a position contradicts itself under the
swap, so the swap both removes its bias from the verdict and measures it). With `votes` > 1 each order is
asked that many times at `temperature` > 0 and the majority counts (self-consistency); a split vote is a tie.
A judge error in either order leaves the pair undecided: never a win for either side.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from observer.analyse.quality import rules
from observer.analyse.quality.judge import JudgeClient
from observer.analyse.quality.prompts import JudgePrompt, Rubric, render_pair
from observer.errors import JudgeError

PAIR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["reasoning", "better"],
    "properties": {
        "reasoning": {"type": "string", "maxLength": 2000},
        "better": {"type": "string", "enum": ["1", "2", "tie"]},
    },
}

Side = Literal["canary", "baseline", "tie"]
PairOutcome = Literal["win", "loss", "tie", "inconsistent", "error"]
"""From the canary's side: win (its answer is better), loss, tie, inconsistent (the orders disagree), error."""

PAIRED_RULES: tuple[str, ...] = ("refusal", "empty", "invalid_json", "truncation", "repetition")


@dataclass(frozen=True)
class PairJudgement:
    """The pairwise judge's decision on one pair and what each order said."""

    outcome: PairOutcome
    baseline_first: Side | None  # None: that order errored
    canary_first: Side | None
    calls: int
    error: str = ""

    def record(self) -> dict[str, Any]:
        return {"outcome": self.outcome, "baseline_first": self.baseline_first, "canary_first": self.canary_first,
                "calls": self.calls, **({"error": self.error[:300]} if self.error else {})}


def combine(baseline_first: Side | None, canary_first: Side | None) -> PairOutcome:
    """One pair's outcome from its two orders (None: that order errored)."""
    if baseline_first is None or canary_first is None:
        return "error"
    if baseline_first != canary_first:
        return "inconsistent"
    return {"canary": "win", "baseline": "loss", "tie": "tie"}[baseline_first]  # type: ignore[return-value]


def position_pick(baseline_first: Side | None, canary_first: Side | None) -> int | None:
    """For a pair whose orders disagree on a winner: 1 when both orders chose the answer shown first, 2 when
    both chose the one shown second (a position bias shows as many more of one than the other); else None."""
    if baseline_first is None or canary_first is None or "tie" in (baseline_first, canary_first) \
            or baseline_first == canary_first:
        return None
    return 1 if baseline_first == "baseline" else 2


def majority(votes: Sequence[str]) -> str:
    """The answer most votes give ("1", "2" or "tie"); a split vote is a tie."""
    top = Counter(votes).most_common()
    if len(top) > 1 and top[0][1] == top[1][1]:
        return "tie"
    return top[0][0]


@dataclass
class PairwiseJudge:
    """Asks an OpenAI-compatible judge (JudgeClient: budget, retries, outcome counts) which answer is better."""

    client: JudgeClient
    prompt: JudgePrompt
    rubric: Rubric
    votes: int = 1
    temperature: float = 0.0

    def identity(self) -> dict[str, str]:
        """What makes two paired results comparable: judge model, pairwise prompt and rubric hashes."""
        return {"judge_model": self.client.model, "prompt_version": self.prompt.version,
                "prompt_hash": self.prompt.hash, "rubric": self.rubric.name, "rubric_hash": self.rubric.hash}

    async def _order(self, prompt: str, first: str, second: str, reference: str | None) -> tuple[str, int]:
        """The majority of `votes` answers for one order: "1", "2" or "tie"."""
        def rendered() -> tuple[str, str]:
            return render_pair(self.prompt, self.rubric, nonce=secrets.token_hex(12), judged_prompt=prompt,
                               first=first, second=second, reference=reference)

        system, user = rendered()
        temperature = self.temperature if self.votes > 1 else 0.0
        answers = await asyncio.gather(*(self.client.ask(system, user, schema=PAIR_SCHEMA, name="preference",
                                                         temperature=temperature, rerender=rendered)
                                         for _ in range(self.votes)))
        return majority([str(a["better"]) for a, _ in answers]), sum(n for _, n in answers)

    async def compare(self, *, prompt: str, baseline: str, canary: str, reference: str | None = None
                      ) -> PairJudgement:
        """Judge one pair in both orders."""
        async def side(first_is_baseline: bool) -> tuple[Side | None, int, str]:
            first, second = (baseline, canary) if first_is_baseline else (canary, baseline)
            try:
                pick, calls = await self._order(prompt, first, second, reference)
            except JudgeError as e:
                return None, 0, f"{e.reason}: {e}"
            if pick == "tie":
                return "tie", calls, ""
            first_side: Side = "baseline" if first_is_baseline else "canary"
            other: Side = "canary" if first_is_baseline else "baseline"
            return (first_side if pick == "1" else other), calls, ""

        (a, ca, ea), (b, cb, eb) = await asyncio.gather(side(True), side(False))
        return PairJudgement(outcome=combine(a, b), baseline_first=a, canary_first=b, calls=ca + cb,
                             error=ea or eb)


def paired_rule(check: str, *, prompt: str, baseline: str, canary: str, baseline_finish: str | None,
                canary_finish: str | None) -> PairOutcome:
    """One rule check on both answers of a pair: a loss when only the canary's answer fails it, a win when
    only the baseline's does, a tie when both pass or both fail; `error` when it decides nothing for either
    (e.g. invalid_json where no JSON was expected, truncation without a finish reason)."""
    def one(output: str, finish: str | None) -> bool | None:
        match check:
            case "refusal":
                return rules.not_refusal(output).passed
            case "empty":
                return rules.not_empty(output).passed
            case "invalid_json":
                return rules.valid_json_when_expected(prompt, output).passed
            case "truncation":
                return rules.not_truncated(finish).passed
            case "repetition":
                return rules.no_repetition(output).passed
        raise ValueError(f"unknown paired rule check {check!r}; known: {', '.join(PAIRED_RULES)}")

    b, c = one(baseline, baseline_finish), one(canary, canary_finish)
    if b is None or c is None:
        return "error"
    if b == c:
        return "tie"
    return "loss" if b else "win"
