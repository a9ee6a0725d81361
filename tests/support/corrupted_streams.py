"""A canary whose requests come back from NaN logits, on dependent slices: the corrupted-requests metric's
trials, shared by tests/unit/test_corrupted_requests.py and bench/corrupted.py."""

from __future__ import annotations

import numpy as np

from observer.analyse.canary.judge import ArmData, Outcome
from observer.config.canary import CanaryMetricSpec, CanarySpec
from tests.support.canary_streams import judged_step

CORRUPTED_SPEC = CanarySpec(metrics=[CanaryMetricSpec(name="nan_logits", kind="ratio", corrupted=True,
                                                      critical=True, base_rate=0.001)])


def corrupted_arm(a: ArmData, rate: float, rng: np.random.Generator) -> ArmData:
    """The arm with corrupted requests per slice among its finished ones, the rate drifting between slices (the
    prompt mix reaches the broken path more or less often), so slices are dependent as in production."""
    slices = []
    for s in a.slices:
        finished = int(s.total_requests or 0)
        p = float(np.clip(rate * rng.lognormal(0.0, 0.5), 0.0, 1.0)) if rate else 0.0
        slices.append(ArmData(**{**s.__dict__, "corrupted": float(rng.binomial(finished, p))}))
    return ArmData(**{**a.__dict__, "slices": tuple(slices),
                      "corrupted": sum(x.corrupted or 0.0 for x in slices)})


def corrupted_outcome(seed: int, canary_rate: float, baseline_rate: float = 0.0) -> Outcome:
    """The nan_logits outcome of one seeded step: the canary corrupted at `canary_rate`, stable at `baseline_rate`."""
    return judged_step(CORRUPTED_SPEC, seed, lambda c, b, rng: (corrupted_arm(c, canary_rate, rng),
                                                                corrupted_arm(b, baseline_rate, rng))
                       ).metric("nan_logits").outcome
