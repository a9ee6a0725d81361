"""Argo measurement semantics the game day applies to the rendered conditions (REFERENCE: Argo Rollouts)."""

from __future__ import annotations

import math

import pytest

from observer.config import load_config
from observer.gameday import evaluate_condition, measurement_phase
from observer.render import argo

GUARD = argo.guarded("result[0] == 1")


@pytest.mark.parametrize(("result", "phase"), [([], "Inconclusive"), ([math.nan], "Inconclusive"),
                                               ([1.0], "Successful"), ([0.0], "Inconclusive"),
                                               ([-1.0], "Failed")],
                         ids=["empty-vector", "nan", "pass", "inconclusive", "fail"])
def test_guarded_verdict_metric(result: list[float], phase: str) -> None:
    assert measurement_phase(GUARD, argo.guarded("result[0] == -1"), result) == phase


def test_unguarded_condition_errors_on_an_empty_vector() -> None:
    # What the guard prevents: Argo marks result[0] on an empty vector an Error (repeated errors abort).
    assert measurement_phase("result[0] == 1", None, []) == "Error"
    assert measurement_phase("result[0] < 1", None, [math.nan]) == "Failed"  # NaN fails a success-only check


def test_failure_only_and_web_conditions() -> None:
    assert measurement_phase(None, argo.guarded("result[0] < 0"), []) == "Successful"
    assert measurement_phase(None, argo.guarded("result[0] < 0"), [-1.0]) == "Failed"
    assert measurement_phase('result == "pass"', 'result == "fail"', "inconclusive") == "Inconclusive"
    assert measurement_phase('result == "pass"', 'result == "fail"', "nodata") == "Inconclusive"
    assert measurement_phase(None, "result == true", True) == "Failed"
    assert measurement_phase(None, "result == true", False) == "Successful"
    assert evaluate_condition("!isNaN(result[0]) || false", [1.0])


def test_every_rendered_prometheus_condition_is_evaluable_on_empty_and_nan() -> None:
    cfg = load_config("deploy/observer.yaml")
    for pm in argo.prometheus_metrics(cfg):
        for result in ([], [math.nan]):
            assert measurement_phase(pm.success, pm.failure, result) in ("Inconclusive", "Successful"), pm
