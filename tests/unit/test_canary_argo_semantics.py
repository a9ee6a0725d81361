"""Argo Rollouts v1.9.1 measurement semantics on every condition the observer generates.

The expected phases are written out by hand from argo-rollouts v1.9.1 (`utils/evaluate/evaluate.go`:
conditions compiled against the value's type, failure wins, neither true → Inconclusive, success-only
false → Failed, failure-only false → Successful; `metricproviders/webmetric/webmetric.go`: a 2xx body that
is not JSON, or empty, is Successful without evaluating anything; a missing JSONPath is Error). They are
data, not derived from the emulation under test.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from observer.config import load_config
from observer.render import argo
from observer_dev.gameday.argo import (
    ArgoError,
    Phase,
    evaluate_condition,
    measurement_phase,
    run_phase,
    web_measurement,
    web_value,
)

S, F, I, E = Phase.SUCCESSFUL, Phase.FAILED, Phase.INCONCLUSIVE, Phase.ERROR  # noqa: E741
CFG = load_config("deploy/observer.yaml")
PROM = {pm.name: pm for pm in argo.prometheus_metrics(CFG)}
GATE_WEB, GATE_PROM = argo.gate_spec(CFG)["metrics"]
GUARD = argo.guardrail_spec(CFG)["metrics"][0]

PROM_RESULTS: dict[str, Any] = {"empty": [], "nan": [math.nan], "one": [1.0], "zero": [0.0], "minus-one": [-1.0],
                                "two-series": [1.0, -1.0], "inf": [math.inf], "scalar": 1.0}
PROM_EXPECTED: dict[str, dict[str, Phase]] = {
    #               empty nan one zero -1 two inf scalar
    "verdict": dict(zip(PROM_RESULTS, (I, I, S, I, F, S, I, E), strict=True)),
    "latency": dict(zip(PROM_RESULTS, (S, S, S, S, F, S, S, E), strict=True)),
    "errors": dict(zip(PROM_RESULTS, (S, S, S, S, F, S, S, E), strict=True)),
    "quality": dict(zip(PROM_RESULTS, (S, S, S, S, F, S, S, E), strict=True)),
    "cost": dict(zip(PROM_RESULTS, (S, S, S, S, F, S, S, E), strict=True)),
    "drift": dict(zip(PROM_RESULTS, (S, S, F, S, S, F, F, E), strict=True)),
}

def _gate(verdict: Any, critical: Any = False) -> bytes:
    return json.dumps({"verdict": verdict if isinstance(verdict, str) else "fail",
                       "gate": {"verdict": verdict, "critical_failed": critical, "reason": "r"}}).encode()


WEB_BODIES: dict[str, bytes] = {
    "pass": _gate("pass"),
    "fail": _gate("fail"),
    "fail-critical": _gate("fail", True),
    "inconclusive": _gate("inconclusive"),
    "nodata": _gate("nodata"),
    "verdict-true": _gate(True, True),
    "verdict-null": _gate(None, None),
    "gate-string": b'{"gate": "pass"}',
    "gate-null": b'{"gate": null}',
    "gate-empty": b'{"gate": {}}',
    "non-json": b"<!doctype html><html><body>Please sign in</body></html>",
    "empty": b"",
    "missing-field": b'{"verdict": "pass", "critical_failed": false}',  # an older observer: no `gate`
}
# v1.9.1 (and v1.10.0-rc1) | master (PR #4770: the conditions run on a non-JSON body as a string)
WEB_EXPECTED: dict[str, dict[str, tuple[Phase, Phase]]] = {
    "gate": {"pass": (S, S), "fail": (F, F), "fail-critical": (F, F), "inconclusive": (I, I), "nodata": (I, I),
             "verdict-true": (I, I), "verdict-null": (I, I), "gate-string": (E, E), "gate-null": (E, E),
             "gate-empty": (I, I), "non-json": (S, E), "empty": (S, E), "missing-field": (E, E)},
    "guardrail": {"pass": (S, S), "fail": (S, S), "fail-critical": (F, F), "inconclusive": (S, S),
                  "nodata": (S, S), "verdict-true": (F, F), "verdict-null": (S, S), "gate-string": (E, E),
                  "gate-null": (E, E), "gate-empty": (S, S), "non-json": (S, E), "empty": (S, E),
                  "missing-field": (E, E)},
}


def test_the_matrix_covers_every_generated_metric() -> None:
    assert set(PROM) == set(PROM_EXPECTED)
    n = len(PROM) * len(PROM_RESULTS) + 2 * len(WEB_BODIES)
    assert n >= 60


@pytest.mark.parametrize("result", list(PROM_RESULTS))
@pytest.mark.parametrize("metric", list(PROM_EXPECTED))
def test_prometheus_metric(metric: str, result: str) -> None:
    pm = PROM[metric]
    assert measurement_phase(pm.success, pm.failure, PROM_RESULTS[result]) == PROM_EXPECTED[metric][result]


@pytest.mark.parametrize("result", list(PROM_RESULTS))
def test_the_gates_prometheus_twin_is_the_verdict_metric(result: str) -> None:
    phase = measurement_phase(GATE_PROM["successCondition"], GATE_PROM["failureCondition"], PROM_RESULTS[result])
    assert phase == PROM_EXPECTED["verdict"][result]


@pytest.mark.parametrize("body", list(WEB_BODIES))
@pytest.mark.parametrize("which", ["gate", "guardrail"])
def test_web_metric(which: str, body: str) -> None:
    m = GATE_WEB if which == "gate" else GUARD
    args = (m.get("successCondition"), m.get("failureCondition"))
    path = m["provider"]["web"]["jsonPath"]
    v191, master = WEB_EXPECTED[which][body]
    assert web_measurement(*args, status=200, body=WEB_BODIES[body], path=path) == v191
    assert web_measurement(*args, status=200, body=WEB_BODIES[body], path=path, master=True) == master


@pytest.mark.parametrize("status", [301, 404, 500, 503])
def test_a_non_2xx_answer_is_an_error(status: int) -> None:
    assert web_measurement(GATE_WEB["successCondition"], None, status=status, body=_gate("pass"),
                           path=GATE_WEB["provider"]["web"]["jsonPath"]) == E


def test_html_cannot_pass_the_gate_run_without_the_prometheus_verdict() -> None:
    html = WEB_BODIES["non-json"]
    web = web_measurement(GATE_WEB["successCondition"], GATE_WEB["failureCondition"], status=200, body=html,
                          path=GATE_WEB["provider"]["web"]["jsonPath"])
    assert web == S  # the v1.9.1 trap: the web metric alone would promote
    for absent in ([], [math.nan], [0.0]):
        twin = measurement_phase(GATE_PROM["successCondition"], GATE_PROM["failureCondition"], absent)
        assert run_phase([web, twin]) in (I, F)
    assert run_phase([web, measurement_phase(GATE_PROM["successCondition"], GATE_PROM["failureCondition"],
                                             [-1.0])]) == F


def _verdict(outcome: str, reason: str, *, critical: bool = False) -> Any:
    from observer.analyse.canary.judge import Verdict
    from observer.analyse.canary.results import Outcome

    return Verdict(canary="canary", baseline="stable", verdict=Outcome(outcome), score=50.0,
                   critical_failed=critical, n_canary=10, n_baseline=40, split_ok=True, canary_share=0.2,
                   expected_share=0.2, metrics=(), reason=reason,
                   evaluated_at=1.0, window_seconds=60.0)


@pytest.mark.parametrize("outcome", ["pass", "fail", "inconclusive", "nodata", "idle"])
def test_the_endpoint_bodies_gate_and_explain_in_the_measurement(outcome: str) -> None:
    # What the verdict endpoint really produces: the gate's phase, and the value Argo stores as the
    # measurement's (shown by `kubectl argo rollouts get` and the UI) carries the reason and the report page.
    from observer.export.canary_api import encode

    report = "http://observer.observability.svc:9464/report/canary/canary?baseline=stable"
    reason = "critical metric failed: ttft fail canary 0.028 vs baseline 0.0024 & <more>\nsecond line"
    body = encode(_verdict(outcome, reason, critical=outcome == "fail"), report=report)
    path = GATE_WEB["provider"]["web"]["jsonPath"]
    expected = {"pass": S, "fail": F}.get(outcome, I)
    assert web_measurement(GATE_WEB["successCondition"], GATE_WEB["failureCondition"], status=200, body=body,
                           path=path) == expected
    assert web_measurement(None, GUARD["failureCondition"], status=200, body=body,
                           path=GUARD["provider"]["web"]["jsonPath"]) == (F if outcome == "fail" else S)
    value = json.loads(web_value(body, path))
    assert value["verdict"] == outcome and value["report"] == report
    assert value["reason"] == reason.splitlines()[0]
    assert "\\u0026 \\u003cmore\\u003e" in web_value(body, path)  # as Go's json.Marshal writes it


def test_member_access_on_objects_only() -> None:
    assert evaluate_condition('result.verdict == "pass"', {"verdict": "pass"})
    assert evaluate_condition('result.verdict == "pass"', {}) is False  # a missing key is nil
    with pytest.raises(ArgoError, match="has no field"):
        evaluate_condition('result.verdict == "pass"', "pass")
    with pytest.raises(ArgoError, match="cannot fetch"):
        evaluate_condition('result.verdict == "pass"', None)


def test_type_mismatch_is_a_compile_error_even_in_a_skipped_branch() -> None:
    with pytest.raises(ArgoError, match="mismatched"):
        evaluate_condition('result == "pass"', True)
    with pytest.raises(ArgoError):
        evaluate_condition("len(result) > 0 && result[0] == 1", 1.0)  # len of a scalar
    with pytest.raises(ArgoError, match="index out of range"):
        evaluate_condition("result[0] == 1", [])
    assert evaluate_condition("len(result) > 0 && result[0] == 1", []) is False  # short-circuit at run time
    assert evaluate_condition("!isNaN(result[0]) || false", [1.0])


def test_evaluation_rules() -> None:
    assert measurement_phase(None, None, "anything") == S
    assert measurement_phase("result[0] < 1", None, [math.nan]) == F  # NaN fails a success-only check
    assert measurement_phase(None, "result == true", None) == S
    assert measurement_phase('result == "pass"', 'result == "pass"', "pass") == F  # failure wins
    assert run_phase([S, I, S]) == I and run_phase([S, E]) == E and run_phase([I, F, E]) == F


def test_every_ratio_kind_has_one_row_and_every_ratio_metric_one_kind() -> None:
    from observer.config.canary import CanaryMetricSpec, CanarySpec, MetricKind
    from observer.conventions.ratios import RATIOS, RatioCounts

    assert set(RATIOS) == set(RatioCounts)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "canary.md").read_text()
    for counts, row in RATIOS.items():
        assert f"| `{counts}` |" in docs, f"docs/canary.md's ratio table lacks {counts}"
        assert row.argo_dimension in ("errors", "latency", "quality")
    assert {m.counts for m in CanarySpec().metrics if m.kind == MetricKind.RATIO} <= set(RatioCounts)
    assert CanaryMetricSpec(name="x", kind=MetricKind.LATENCY, family="ttft").counts is None
