"""The `feedback` metric: users' negative share on each arm's sampled answers, judged with the slice test of
the ratio metrics (slices by when users gave the events).

Feedback is sparse (users answer 2-10% of answers), late and self-selected, and one conversation's events go
together: the slice t-test takes a slice's events as one piece of evidence and merges slices whose excesses
run together, so a grumpy conversation is one unit, not many. Below `min_responses` events on an arm the
metric is `nodata`, never `pass`. A canary whose users answer less often than the baseline's is named: who
still answers is then a different crowd, and the shares compare less well.
"""

from __future__ import annotations

import numpy as np

from observer.analyse.canary import planned
from observer.analyse.canary.results import ArmData, MetricResult, Outcome
from observer.analyse.canary.sliced import base_result, slice_outcome
from observer.config.canary import CanaryMetricSpec

RESPONSE_RATE_DROP = 0.25
"""A canary whose users answer at least this much less often (relative) than the baseline's is named."""


def judge_feedback(m: CanaryMetricSpec, c: ArmData, b: ArmData, *, alpha: float, power: float,
                   plan: planned.PlannedEnd | None) -> MetricResult:
    fc, fb = c.feedback, b.feedback
    if fc is None or fb is None:
        return base_result(m, Outcome.NODATA, detail="no users' feedback read (the sample store is off, or this "
                                                      "source reads none)")
    if fc.error or fb.error:
        return base_result(m, Outcome.NODATA, detail=f"users' feedback unreadable: {fc.error or fb.error}")
    if fc.events < m.min_responses or fb.events < m.min_responses:
        return base_result(m, Outcome.NODATA, n_canary=fc.events, n_baseline=fb.events,
                           detail=f"too few feedback events: canary {fc.events}, baseline {fb.events}, "
                                  f"{m.min_responses} each needed (min_responses)")
    k = min(len(fc.slices), len(fb.slices))
    counts = np.array([(*fc.slices[i], *fb.slices[i]) for i in range(k)], dtype=float).reshape(-1, 4)
    # A slice where one arm's users gave nothing says nothing of the shares (the test is conditional on the
    # slice's events: its excess is 0 whatever the canary does), and counted it would dilute the t-test where
    # users answer in bursts. The slices with events on both arms are the units; the planned end keeps its
    # place among them.
    some = (counts[:, 1] > 0) & (counts[:, 3] > 0)
    if plan is not None and (fc.truncated or fb.truncated):
        plan = None  # its slices are counted from the analysis start, which the reader cut off
    if plan is not None:
        plan = planned.PlannedEnd(slices=int(some[:plan.slices].sum()), reached=plan.reached)
    counts = counts[some]
    rc, rb = fc.response_rate, fb.response_rate
    parts = [f"negative share of users' feedback ({fc.events} events from {fc.units} conversations vs "
             f"{fb.events} from {fb.units})"]
    if rc is not None and rb is not None:
        parts.append(f"response rate {rc:.1%} vs {rb:.1%}")
        if rc < (1.0 - RESPONSE_RATE_DROP) * rb:
            parts.append("the canary's users answer less often: who still answers is a different crowd, the "
                         "shares compare less well")
    for note in (fc.note, fb.note):
        if note:
            parts.append(note)
    return slice_outcome(m, counts[:, 0], counts[:, 1], counts[:, 2], counts[:, 3], alpha=alpha, power=power,
                         pooled=False, plan=plan, detail="; ".join(parts))
