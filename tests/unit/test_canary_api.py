"""The verdict endpoint (strict JSON, < 2 KB, always 200), the exported gauges, pairs and the CLI table."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from observer import conventions as names
from observer.analyse.canary.collector import CanaryCollector
from observer.analyse.canary.judge import ArmData, Outcome
from observer.analyse.canary.service import CanaryService
from observer.analyse.pairs import expected_share, resolve_pairs
from observer.config import parse_config
from observer.config.canary import CanaryMetricSpec
from observer.config.spec import ObserverConfig
from observer.errors import ConfigError
from observer.export import canary_api as api
from observer.fleetview import LiveFleet
from tests.support.canary_streams import PAIR_FLEET, ArmProfile, StreamSource

CONFIG = PAIR_FLEET + """canary:
  window_seconds: 1200
"""


def _service(source: Any, *, now: float = 1800.0, text: str = CONFIG) -> CanaryService:
    return CanaryService(parse_config(text, environ={}), source, clock=lambda: now)


def _client(service: CanaryService) -> TestClient:
    app = FastAPI()
    app.include_router(api.router(service))
    return TestClient(app)


def _strict(body: bytes) -> dict[str, Any]:
    def bad(x: str) -> None:
        raise AssertionError(f"non-strict JSON constant {x}")

    out: dict[str, Any] = json.loads(body, parse_constant=bad)
    return out


def test_verdict_endpoint_pass_and_window() -> None:
    src = StreamSource()
    r = _client(_service(src)).get("/api/v1/canary/verdict", params={"canary": "canary", "baseline": "stable"})
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert len(r.content) < 2048
    body = _strict(r.content)
    assert body["verdict"] == "pass" and body["critical_failed"] is False
    assert set(body["n"]) == {"canary", "baseline"} and body["n"]["canary"] > 0
    assert body["metrics"]["errors"]["result"] == "pass" and body["metrics"]["errors"]["min_n"] > 0
    assert body["split"]["expected"] == 0.25
    # window capped at canary.window_seconds (1200 s before now = 1800)
    assert src.calls[0] == ("canary", 600.0, 1800.0)


def test_since_narrows_the_window_and_defaults_to_the_only_pair() -> None:
    src = StreamSource()
    r = _client(_service(src)).get("/api/v1/canary/verdict", params={"since": 1790})
    body = _strict(r.content)
    assert body["canary"] == "canary" and body["baseline"] == "stable"
    assert body["verdict"] == "inconclusive" and src.calls[0][1] == 1790.0


@pytest.mark.parametrize(("weight", "verdict", "split_ok"), [("25", "pass", True), ("0.25", "pass", True),
                                                            ("5", "inconclusive", False), ("any", "pass", True),
                                                            ("", "pass", True), ("abc", "nodata", True),
                                                            ("150", "nodata", True)],
                         ids=["percent", "fraction", "wrong-percent", "any", "empty", "junk", "over-100"])
def test_weight_parameter(weight: str, verdict: str, split_ok: bool) -> None:
    r = _client(_service(StreamSource())).get("/api/v1/canary/verdict", params={"weight": weight})
    body = _strict(r.content)
    assert r.status_code == 200 and body["verdict"] == verdict and body["split"]["ok"] is split_ok
    if weight == "any":
        assert body["split"]["expected"] is None


def test_fail_sets_critical_failed() -> None:
    r = _client(_service(StreamSource(ttft_scale=1.5))).get("/api/v1/canary/verdict")
    body = _strict(r.content)
    assert body["verdict"] == "fail" and body["critical_failed"] is True
    assert body["metrics"]["ttft"]["result"] == "fail" and body["metrics"]["ttft"]["ci"][0] > 1.0


@pytest.mark.parametrize("params", [{"canary": "nope", "baseline": "stable"}, {"canary": "canary"},
                                    {"canary": "canary", "baseline": "canary"}],
                         ids=["unknown-version", "missing-baseline", "same-version"])
def test_bad_names_answer_nodata_with_200(params: dict[str, str]) -> None:
    r = _client(_service(StreamSource())).get("/api/v1/canary/verdict", params=params)
    body = _strict(r.content)
    assert r.status_code == 200 and body["verdict"] == "nodata" and body["reason"]


async def test_unknown_names_are_a_field_of_the_verdict() -> None:
    service = _service(StreamSource())
    v = await service.verdict_for("nope", "stable", since=None, weight=None)
    assert v.verdict is Outcome.NODATA and v.unknown == ("nope",)
    assert (await service.verdict_for("canary", "stable", since=None, weight=None)).unknown == ()


async def test_the_periodic_judgment_checks_the_split_as_the_gate_last_asked() -> None:
    # One record per pair holds what the gate asked: a gate that asks `any` (Flagger's default) gets a
    # periodic judgment without the split check too, and one that names a weight gets it checked at that weight.
    service = _service(StreamSource())
    await service.verdict_for("canary", "stable", since=None, weight="any")
    await service.run_once()
    assert service.latest("canary", "stable").expected_share is None  # type: ignore[union-attr]
    await service.verdict_for("canary", "stable", since=None, weight="25")
    await service.run_once()
    assert service.latest("canary", "stable").expected_share == 0.25  # type: ignore[union-attr]
    bad = await service.verdict_for("canary", "stable", since=None, weight="250")
    assert bad.verdict is Outcome.NODATA and "not a share" in bad.reason
    await service.run_once()  # a refused weight changes nothing the gate asked before
    assert service.latest("canary", "stable").expected_share == 0.25  # type: ignore[union-attr]


def test_body_stays_under_2kb_with_many_metrics() -> None:
    metrics = "\n".join(f"    - {{name: ratio_metric_number_{i:02d}, kind: ratio, finished_reasons: [error]}}"
                        for i in range(40))
    text = CONFIG + "  metrics:\n" + metrics + "\n"
    r = _client(_service(StreamSource(), text=text)).get("/api/v1/canary/verdict")
    assert r.status_code == 200 and len(r.content) <= api.MAX_BYTES
    assert _strict(r.content)["verdict"] in {"pass", "fail", "inconclusive", "nodata"}


def test_judge_fault_is_a_5xx_not_a_verdict() -> None:
    class Broken:
        name = "broken"

        async def arm(self, *a: Any, **k: Any) -> ArmData:
            raise RuntimeError("bug")

    client = TestClient(_app_with(Broken()), raise_server_exceptions=False)
    assert client.get("/api/v1/canary/verdict").status_code == 500


def _app_with(source: Any) -> FastAPI:
    app = FastAPI()
    app.include_router(api.router(_service(source)))
    return app


async def test_gauges_never_nan_and_counters() -> None:
    service = _service(StreamSource(canary=ArmProfile(error_rate=0.05)))
    await service.run_once()
    registry = CollectorRegistry()
    registry.register(CanaryCollector(verdicts=service.verdicts, counters=lambda: dict(service.evaluations),
                                      source_errors=lambda: dict(service.source_errors)))
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}
    verdict = fams[names.CANARY_VERDICT].samples
    assert [(s.labels, s.value) for s in verdict] == [({"canary": "canary", "baseline": "stable"}, -1.0)]
    results = {s.labels["metric"]: s.value for s in fams[names.CANARY_METRIC_RESULT].samples}
    assert results["errors"] == -1.0 and results["golden"] == 0.0
    for fam in fams.values():
        for s in fam.samples:
            assert s.value == s.value and abs(s.value) != float("inf"), s
    evals = fams[names.CANARY_EVALUATIONS].samples
    assert any(s.labels["outcome"] == "fail" and s.value == 1.0 for s in evals)
    samples = {s.labels["arm"]: s.value for s in fams[names.CANARY_SAMPLES].samples}
    assert samples["canary"] > 0 and samples["baseline"] > samples["canary"]
    assert service.latest("canary", "stable") is not None
    assert service.latest("canary", "stable").verdict is Outcome.FAIL  # type: ignore[union-attr]


def test_pairs_from_roles_and_explicit() -> None:
    cfg = parse_config(CONFIG, environ={})
    assert [(p.canary, p.baseline) for p in resolve_pairs(cfg)] == [("canary", "stable")]
    assert expected_share(LiveFleet(cfg.fleet.versions).version, "canary", "stable") == pytest.approx(0.25)
    bad = CONFIG + "  pairs: [{canary: canary, baseline: ghost}]\n"
    with pytest.raises(ConfigError, match="ghost"):
        resolve_pairs(parse_config(bad, environ={}))
    two_stables = ObserverConfig.model_validate({"fleet": {"versions": [
        {"name": "a", "role": "stable"}, {"name": "b", "role": "stable"}, {"name": "c", "role": "canary"}]}})
    with pytest.raises(ConfigError, match="stable"):
        resolve_pairs(two_stables)


@pytest.mark.parametrize(("snippet", "match"), [
    ("  metrics: [{name: x, kind: latency}]\n", "family"),
    ("  metrics: [{name: x, kind: ratio}]\n", "exactly one"),
    ("  metrics: [{name: Bad-Name, kind: drift, field: prompts}]\n", "metric name"),
    ("  marginal_score: 99\n  pass_score: 90\n", "marginal_score"),
    ("  source: prometheus\n", "prometheus_url"),
    ("  metrics: [{name: x, kind: drift, field: prompts, group: nowhere}]\n", "group"),
], ids=["latency-no-family", "ratio-no-source", "bad-name", "marginal-above-pass", "prom-no-url", "bad-group"])
def test_config_errors_name_the_problem(snippet: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        parse_config(CONFIG + snippet, environ={})


def test_cli_table_renders_the_body() -> None:
    from rich.console import Console

    from observer.cli.canary import verdict_table

    service = _service(StreamSource())
    body = _strict(_client(service).get("/api/v1/canary/verdict").content)
    console = Console(record=True, width=160)
    console.print(verdict_table(body))
    text = console.export_text()
    assert "PASS" in text and "errors (critical)" in text and "ttft" in text


async def test_the_periodic_judgment_starts_where_the_gate_asked_its_analysis_to() -> None:
    # A version name reused across revisions (Flagger's): the gate's `since` (the revision's start) bounds the
    # periodic judgment too, so the exported gauges do not mix in the previous revision's requests.
    source = StreamSource()
    service = _service(source)
    await service.run_once()
    assert source.calls[-1][1] == 1800.0 - 1200  # the whole window
    await service.verdict_for("canary", "stable", since=1500.0, weight=None)
    await service.verdict_for("canary", "stable", since=900.0, weight=None)  # an older start never widens it
    source.calls.clear()
    await service.run_once()
    assert {since for _, since, _ in source.calls} == {1500.0}
    await service.verdict_for("canary", "stable", since=9999.0, weight=None)  # a clock ahead: capped at now
    source.calls.clear()
    await service.run_once()
    assert {since for _, since, _ in source.calls} == {1800.0}


def test_a_nodata_critical_metric_says_why_even_in_the_shortened_body() -> None:
    from observer.analyse.canary.judge import MetricResult, Verdict

    why = "no ttft observations: no vLLM series under its model name"
    metrics = tuple([MetricResult(name="ttft", kind="latency", outcome=Outcome.NODATA, critical=True, advisory=False,
                                  group="latency", detail=why),
                     MetricResult(name="e2e", kind="latency", outcome=Outcome.NODATA, critical=False, advisory=False,
                                  group="latency", detail="not critical: not said")]
                    + [MetricResult(name=f"m{i}", kind="ratio", outcome=Outcome.PASS, critical=False, advisory=False,
                                    group="errors", canary=0.01, baseline=0.01, ratio=1.0, p_value=0.5,
                                    ci_low=0.9, ci_high=1.1, n_canary=1000, n_baseline=4000, min_n=100)
                       for i in range(16)])
    v = Verdict(canary="canary", baseline="stable", verdict=Outcome.INCONCLUSIVE, score=0.0, critical_failed=False,
                n_canary=1, n_baseline=1, split_ok=True, canary_share=None, expected_share=None, metrics=metrics,
                reason="r", evaluated_at=0.0)
    full = api.verdict_body(v)
    assert full["metrics"]["ttft"]["why"] == why and "why" not in full["metrics"]["e2e"]
    body = json.loads(api.encode(v))
    assert len(api.encode(v)) <= api.MAX_BYTES and "ci" not in body["metrics"]["m0"]  # shortened
    assert body["metrics"]["ttft"]["why"] == why


class _NoTraffic:
    """Both arms with request counters and no requests: every look is nodata."""

    name = "no-traffic"

    async def arm(self, version: str, metrics: Sequence[CanaryMetricSpec], *, since: float, now: float,
                  with_drift: bool) -> ArmData:
        return ArmData(requests={"stop": 0.0})


@pytest.mark.parametrize("then", ["fail", "hold"])
async def test_a_canary_that_never_decides_ends_by_the_policy(then: str) -> None:
    now = [1000.0]
    service = CanaryService(parse_config(CONFIG + f"  end: {{after_seconds: 60, then: {then}}}\n", environ={}),
                            _NoTraffic(), clock=lambda: now[0])
    first = await service.evaluate("canary", "stable")
    assert first.verdict is Outcome.NODATA and first.undecided_seconds == 0.0
    now[0] = 1030.0
    assert (await service.evaluate("canary", "stable")).undecided_seconds == 30.0
    now[0] = 1061.0
    ended = await service.evaluate("canary", "stable")
    assert ended.undecided_seconds == 61.0
    if then == "fail":  # every gate rolls it back, and the reason says why
        assert ended.verdict is Outcome.FAIL and "canary.end.then: fail" in ended.reason
        assert "no traffic" in ended.reason  # the last look's own reason
    else:  # the gates hold; the alert pages a person
        assert ended.verdict is Outcome.NODATA
    # A new analysis of the pair (a gate's `since`, Flagger's new revision) starts the clock again.
    now[0] = 1100.0
    fresh = await service.verdict_for("canary", "stable", since=1090.0, weight="any")
    assert fresh.verdict is Outcome.NODATA and fresh.undecided_seconds == 10.0


def test_a_fail_policy_longer_than_an_argo_step_is_refused() -> None:
    with pytest.raises(ConfigError, match="before the policy can fail it"):
        parse_config(CONFIG + "  end: {after_seconds: 900, then: fail}\n", environ={})
    parse_config(CONFIG + "  end: {after_seconds: 900, then: hold}\n", environ={})
    with pytest.raises(ConfigError, match="not a duration"):
        parse_config(CONFIG + "  argo_interval: one minute\n", environ={})
