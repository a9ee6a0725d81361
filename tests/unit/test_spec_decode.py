"""Speculative decoding as an optional canary metric: vLLM's draft and accepted token counters become rejected ÷
draft tokens, judged on slices like finished requests. A draft-model change is what a canary ships."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from observer.analyse.canary.judge import Outcome
from observer.collect.vllm import parse_vllm
from observer.conventions import vllm
from observer_dev.sim.engine import SimEngine
from observer_dev.sim.profile import build_profile
from observer_dev.sim.vllm_exposition import VllmCollector
from tests.support.canary_streams import judged_step
from tests.support.spec_decode_streams import SPEC_DECODE_SPEC, spec_arm, spec_outcome


def _exposition(acceptance: float | None) -> str:
    engine = SimEngine(model="m", profile=build_profile({"load_rps": 10, "spec_decode_acceptance": acceptance}),
                       seed=1)
    engine.tick(60.0)
    registry = CollectorRegistry()
    registry.register(VllmCollector(engine.snapshot))
    return generate_latest(registry).decode()


def test_the_parser_turns_draft_and_accepted_tokens_into_outcomes() -> None:
    m = parse_vllm(_exposition(0.7)).models["m"]
    spec = m.labelled_counters[vllm.SPEC_DECODE]
    assert set(spec) == {"accepted", "rejected"}
    assert abs(spec["accepted"] / (spec["accepted"] + spec["rejected"]) - 0.7) < 0.02
    assert vllm.SPEC_DECODE not in parse_vllm(_exposition(None)).models["m"].labelled_counters  # speculation off


def test_a_worse_draft_model_fails_and_an_equal_one_does_not() -> None:
    """Over seeded trials: a canary accepting 60% of draft tokens where the baseline accepts 70% (rejections ×1.33)
    fails nearly always; an identical one almost never fails (the critical metric's α is 0.01)."""
    trials = 60
    worse = [spec_outcome(seed, 0.6) for seed in range(trials)]
    same = [spec_outcome(seed, 0.7) for seed in range(trials)]
    assert sum(o is Outcome.FAIL for o in worse) >= 0.95 * trials, worse
    assert sum(o is Outcome.FAIL for o in same) <= 2, same
    assert sum(o is Outcome.PASS for o in same) >= 0.8 * trials, same


def test_speculation_off_in_one_arm_is_nodata_not_a_pass() -> None:
    v = judged_step(SPEC_DECODE_SPEC, 1, lambda c, b, rng: (c, spec_arm(b, 0.7, rng)))
    assert v.metric("spec_acceptance").outcome is Outcome.NODATA and v.verdict is not Outcome.PASS
