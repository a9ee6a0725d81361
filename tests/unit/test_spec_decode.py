"""Speculative decoding as an optional canary metric: vLLM's draft and accepted token counters become rejected ÷
draft tokens, judged on slices like finished requests. A draft-model change is what a canary ships."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry, generate_latest

from observer.analyse.canary.judge import ArmData, Outcome
from observer.collect.vllm import parse_vllm
from observer.config.canary import CanaryMetricSpec, CanarySpec
from observer.conventions import vllm
from observer_dev.sim.engine import SimEngine
from observer_dev.sim.profile import build_profile
from observer_dev.sim.vllm_exposition import VllmCollector
from tests.support.canary_streams import judged_step

SPEC = CanarySpec(metrics=[CanaryMetricSpec(name="spec_acceptance", kind="ratio", spec_decode=True, critical=True,
                                            effect_ratio=1.5, base_rate=0.2)])


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


def _arm(a: ArmData, acceptance: float, rng: np.random.Generator) -> ArmData:
    """The arm with draft tokens per slice: proportional to its requests, the acceptance drifting from slice to
    slice (prompt mix, batch composition), so slices are dependent as in production."""
    slices = []
    for s in a.slices:
        draft = int(rng.poisson(60 * max(1.0, float(s.total_requests or 0))))
        p = float(np.clip(acceptance + rng.normal(0.0, 0.03), 0.0, 1.0))
        accepted = int(rng.binomial(draft, p))
        slices.append(ArmData(**{**s.__dict__, "spec_decode": {"accepted": accepted, "rejected": draft - accepted}}))
    accepted = sum(x.spec_decode["accepted"] for x in slices if x.spec_decode)
    rejected = sum(x.spec_decode["rejected"] for x in slices if x.spec_decode)
    return ArmData(**{**a.__dict__, "slices": tuple(slices), "spec_decode": {"accepted": accepted,
                                                                             "rejected": rejected}})


def _outcome(seed: int, canary_acceptance: float) -> Outcome:
    return judged_step(SPEC, seed, lambda c, b, rng: (_arm(c, canary_acceptance, rng), _arm(b, 0.7, rng))
                       ).metric("spec_acceptance").outcome


def test_a_worse_draft_model_fails_and_an_equal_one_does_not() -> None:
    """Over seeded trials: a canary accepting 60% of draft tokens where the baseline accepts 70% (rejections ×1.33)
    fails nearly always; an identical one almost never fails (the critical metric's α is 0.01)."""
    trials = 60
    worse = [_outcome(seed, 0.6) for seed in range(trials)]
    same = [_outcome(seed, 0.7) for seed in range(trials)]
    assert sum(o is Outcome.FAIL for o in worse) >= 0.95 * trials, worse
    assert sum(o is Outcome.FAIL for o in same) <= 2, same
    assert sum(o is Outcome.PASS for o in same) >= 0.8 * trials, same


def test_speculation_off_in_one_arm_is_nodata_not_a_pass() -> None:
    v = judged_step(SPEC, 1, lambda c, b, rng: (c, _arm(b, 0.7, rng)))
    assert v.metric("spec_acceptance").outcome is Outcome.NODATA and v.verdict is not Outcome.PASS
