"""The paired canary metric (issue 16): a sequential sign test on shadow pairs, valid at every look."""

from __future__ import annotations

import numpy as np
import pytest

from observer.analyse.canary import stats
from observer.analyse.canary.judge import ArmData, Outcome, PairCounts, judge_metric
from observer.analyse.canary.sources import paired_counts
from observer.analyse.canary.verdict import judge
from observer.config.canary import CanaryMetricSpec, CanarySpec
from observer.export.canary_api import verdict_body

ALPHA = 0.01
PAIRED = CanaryMetricSpec(name="paired_judge", kind="paired", paired_check="judge", group="quality")


def run(counts: PairCounts | None, note: str = "") -> object:
    arm = ArmData(paired={} if counts is None else {"judge": counts}, paired_note=note)
    return judge_metric(PAIRED, arm, ArmData(), alpha=ALPHA, power=0.8)


def test_no_pairs_is_nodata_with_the_reason() -> None:
    r = run(None, note="shadow replay is off (quality.shadow.enabled, sampling store)")
    assert r.outcome is Outcome.NODATA and "shadow replay is off" in r.detail


def test_below_the_minimum_decided_pairs_it_is_inconclusive_never_pass() -> None:
    need = stats.paired_sample_size(effect_share=PAIRED.effect_share, alpha=ALPHA)
    r = run(PairCounts(wins=need // 2 - 1, losses=need // 2 - 1, ties=500))
    assert r.outcome is Outcome.INCONCLUSIVE and r.min_n == need
    assert f"a pass needs {need} decided pairs" in r.detail


def test_balanced_pairs_past_the_minimum_pass() -> None:
    need = stats.paired_sample_size(effect_share=PAIRED.effect_share, alpha=ALPHA)
    r = run(PairCounts(wins=need // 2 + 1, losses=need // 2 + 1, ties=40, inconsistent=7, errors=3))
    assert r.outcome is Outcome.PASS
    assert r.evidence == {"wins": need // 2 + 1, "losses": need // 2 + 1, "ties": 40, "position_inconsistent": 7,
                          "errors": 3}


def test_a_canary_losing_most_decided_pairs_fails() -> None:
    r = run(PairCounts(wins=5, losses=40, ties=100))
    assert r.outcome is Outcome.FAIL and r.p_value is not None and r.p_value < ALPHA
    assert r.canary == pytest.approx(40 / 45)


def test_errors_and_inconsistent_pairs_are_never_wins() -> None:
    r = run(PairCounts(wins=0, losses=0, ties=0, inconsistent=300, errors=300))
    assert r.outcome is Outcome.INCONCLUSIVE and r.n_canary == 0


def test_the_verdict_json_carries_the_evidence_and_the_judge_identity() -> None:
    spec = CanarySpec(metrics=[PAIRED, CanaryMetricSpec(name="errors", kind="ratio", finished_reasons=["error"],
                                                        critical=True, group="errors")])
    ident = {"judge_model": "j", "prompt_hash": "sha256:1", "rubric_hash": "sha256:2"}
    c = ArmData(requests={"stop": 500.0}, paired={"judge": PairCounts(wins=2, losses=30, ties=10)},
                judge_identity=ident)
    v = judge(spec, canary="canary", baseline="stable", canary_data=c, baseline_data=ArmData(requests={"stop": 500.0}),
              expected_share=None, now=0.0)
    body = verdict_body(v)
    assert body["metrics"]["paired_judge"]["result"] == "fail"
    assert body["metrics"]["paired_judge"]["evidence"]["losses"] == 30
    assert body["judge"] == ident


def test_outcomes_are_tallied_per_check() -> None:
    rows = [{"judge": "win", "refusal": "tie"}, {"judge": "loss", "refusal": "loss"}, {"judge": "inconsistent"},
            {"judge": "error", "refusal": "error"}]
    c = paired_counts(rows, {"judge", "refusal"})
    assert c["judge"] == PairCounts(wins=1, losses=1, ties=0, inconsistent=1, errors=1)
    assert c["refusal"] == PairCounts(wins=0, losses=1, ties=1, inconsistent=0, errors=1)


def test_config_refuses_an_unknown_paired_check() -> None:
    with pytest.raises(ValueError, match="paired_check 'toxicity' is not one of"):
        CanaryMetricSpec(name="p", kind="paired", paired_check="toxicity")


def _bursty_aa(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """An A/A pair stream on dependent traffic: prompts arrive in bursts of similar prompts (one user's
    session), so whether a pair is decided is strongly correlated within a burst; both answers come from
    the same model, so within a decided pair each side wins with probability ½ (exchangeable)."""
    decided = np.zeros(n, dtype=bool)
    i = 0
    while i < n:
        size = int(rng.geometric(1 / 8))
        p_decided = rng.choice([0.05, 0.9])  # easy prompts tie, hard ones split
        decided[i:i + size] = rng.random(min(size, n - i)) < p_decided
        i += size
    loss = rng.random(n) < 0.5
    return decided & loss, decided & ~loss


def test_aa_false_fail_rate_holds_under_dependence_and_every_look() -> None:
    rng = np.random.default_rng(16)
    trials, fails = 400, 0
    for _ in range(trials):
        losses, wins = _bursty_aa(rng, 600)
        cl, cw = np.cumsum(losses), np.cumsum(wins)
        for look in range(20, 600, 20):  # a look every 20 pairs
            if stats.paired_test(int(cl[look]), int(cw[look]), alpha=ALPHA).reject:
                fails += 1
                break
    assert fails / trials <= ALPHA * 2  # ≤ α in expectation; 2α leaves room for the seed's noise


def test_a_worse_canary_is_caught() -> None:
    rng = np.random.default_rng(7)
    caught = 0
    for _ in range(100):
        decided = rng.random(400) < 0.3
        loss = rng.random(400) < 0.8  # the canary loses 80% of the decided pairs
        t = stats.paired_test(int((decided & loss).sum()), int((decided & ~loss).sum()), alpha=ALPHA)
        caught += t.reject
    assert caught >= 95
