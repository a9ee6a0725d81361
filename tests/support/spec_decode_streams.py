"""A canary whose draft model is accepted less often, on dependent slices: the speculative-decoding metric's
trials, shared by tests/unit/test_spec_decode.py and bench/spec_decode.py."""

from __future__ import annotations

import numpy as np

from observer.analyse.canary.judge import ArmData, Outcome
from observer.config.canary import CanaryMetricSpec, CanarySpec
from tests.support.canary_streams import judged_step

SPEC_DECODE_SPEC = CanarySpec(metrics=[CanaryMetricSpec(name="spec_acceptance", kind="ratio", spec_decode=True,
                                                        critical=True, effect_ratio=1.5, base_rate=0.2)])


def spec_arm(a: ArmData, acceptance: float, rng: np.random.Generator) -> ArmData:
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


def spec_outcome(seed: int, canary_acceptance: float) -> Outcome:
    """The spec_acceptance outcome of one seeded step: the canary accepting `canary_acceptance`, stable 0.7."""
    return judged_step(SPEC_DECODE_SPEC, seed, lambda c, b, rng: (spec_arm(c, canary_acceptance, rng),
                                                                  spec_arm(b, 0.7, rng))
                       ).metric("spec_acceptance").outcome
