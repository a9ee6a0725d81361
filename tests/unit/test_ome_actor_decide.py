"""Actor mode's decision (observer/discover/actor.py): which OME verb a step's verdict writes, and when none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from observer.discover.actor import PAUSED, PROMOTE, ROLLBACK, OmeStep, decide, ome_step
from observer_dev import primitive_objects as po

ENTERED = 1_796_004_800.0  # 2026-11-30T02:13:20Z as Unix seconds


def step(**changes: object) -> OmeStep:
    s = ome_step(po.ome_isvc("chat", stable="0f0f0f0f", canary="a1b2c3d4", phase="Canarying",
                             step_entered="2026-11-30T02:13:20Z"))
    assert s is not None
    return replace(s, **changes)  # type: ignore[arg-type]


def test_the_step_is_read_from_the_objects_status_and_its_own_canary_steps() -> None:
    s = step()
    assert (s.name, s.canary, s.stable, s.step, s.phase) == ("chat", "a1b2c3d4", "0f0f0f0f", 0, "Canarying")
    assert s.entered == ENTERED and s.bake == 600.0  # the first step's pause.duration: 10m
    settled = po.ome_isvc("chat", stable="0f0f0f0f", canary=None, phase="Stable")
    assert ome_step(settled) is None  # no canary in flight: nothing to act on


@pytest.mark.parametrize(("outcome", "after", "changes", "want"), [
    ("pass", 600.0, {}, (PROMOTE, "a1b2c3d4")),
    ("pass", 599.0, {}, None),  # the bake has not passed since the step was entered
    ("fail", 1.0, {}, (ROLLBACK, "true")),  # a fail does not wait for the bake
    ("inconclusive", 900.0, {}, None),
    ("nodata", 900.0, {}, None),
    ("idle", 900.0, {}, None),
    ("pass", 900.0, {"promoted_through": "a1b2c3d4"}, None),  # OME has not cleared the last promote yet
    ("pass", 900.0, {"annotations": {PROMOTE: "a1b2c3d4"}}, None),  # already written
    ("pass", 900.0, {"annotations": {PAUSED: "freeze"}}, None),  # an operator froze it
    ("fail", 900.0, {"annotations": {PAUSED: "freeze"}}, (ROLLBACK, "true")),  # rolling back stays safe
    ("fail", 900.0, {"annotations": {ROLLBACK: "true"}}, None),  # written once
    ("pass", 900.0, {"annotations": {ROLLBACK: "true"}}, None),  # never promote what is rolling back
    ("fail", 900.0, {"phase": "Pending"}, None),  # the step's instances are not serving yet
    ("fail", 900.0, {"phase": "Failed"}, None),  # parked: a person decides
    ("pass", 900.0, {"phase": "Paused"}, (PROMOTE, "a1b2c3d4")),  # a serving step at its gate
    ("pass", 900.0, {"entered": None}, None),
])
def test_decide(outcome: str, after: float, changes: dict[str, object], want: tuple[str, str] | None) -> None:
    assert decide(step(**changes), outcome, now=ENTERED + after, bake=600.0) == want
