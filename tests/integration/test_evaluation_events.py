"""Golden scores and canary verdicts as OpenTelemetry GenAI `gen_ai.evaluation.result` events, through the real
SDK's OTLP/HTTP log exporter into a receiver on loopback; attribute names checked against the conventions' YAML
model (tests/fixtures/otel-genai, pinned in SOURCES.md); an endpoint that is down, slow or refusing costs
counted events and never a blocked or failed scoring run."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry, generate_latest

from observer.analyse.canary.service import CanaryService
from observer.analyse.quality.events import emit_golden
from observer.analyse.quality.model import Answer, GoldenRunResult, ItemResult, Outcome
from observer.config import parse_config
from observer.config.fleet import EvaluationEventsSpec
from observer.errors import ConfigError
from observer.evalevents import CONVENTION_ATTRIBUTES, EVENT, PROPOSED_ATTRIBUTES, EvaluationEvents
from tests.support import report_app as ra
from tests.support.otlp_logs import otlp_logs_receiver

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "otel-genai"


def convention_attributes() -> set[str]:
    """The attributes the conventions define for gen_ai.evaluation.result (refs and referenced groups)."""
    events = yaml.safe_load((FIXTURES / "events.yaml").read_text())["events"]
    groups = {g["id"]: g for g in yaml.safe_load((FIXTURES / "spans-error-group.yaml").read_text())["attribute_groups"]}
    event = next(e for e in events if e["name"] == EVENT)
    out: set[str] = set()
    for a in event["attributes"]:
        if "ref" in a:
            out.add(a["ref"])
        else:
            out.update(x["ref"] for x in groups[a["ref_group"]]["attributes"])
    return out


def golden_run() -> GoldenRunResult:
    def item(i: str, passed: bool | None, *, error: str | None = None) -> ItemResult:
        answer = Answer(text="Paris" if passed else "Lyon", finish_reason="stop", ttft_s=0.1, latency_s=0.4,
                        error=error)
        outcomes = () if error else (Outcome("exact", passed, 1.0 if passed else 0.0, "matched" if passed else
                                             "expected 'Paris'"),)
        return ItemResult(item_id=i, category="factual", answer=answer, outcomes=outcomes)

    return GoldenRunResult(version="canary", golden_set="factual", set_version="sha256:0123456789abcdef",
                           started=1.0, finished=2.0, items=(item("q1", True), item("q2", False),
                                                             item("q3", None, error="HTTP 500")),
                           judge_model="judge-7b", judge_prompt_version="v3")


def spec(url: str, **kw: Any) -> EvaluationEventsSpec:
    return EvaluationEventsSpec(enabled=True, endpoint=url, **kw)


def test_golden_scores_and_verdicts_arrive_as_evaluation_events_with_trace_links() -> None:
    tracer = TracerProvider().get_tracer("test")
    with otlp_logs_receiver() as rx:
        events = EvaluationEvents(spec(rx.url, headers={"x-tenant": "ml"}), schedule_delay_millis=50)
        with tracer.start_as_current_span("job quality-golden") as golden_span:
            emit_golden(events, golden_run())
        config = parse_config(ra.config_text(1), environ={})
        service = CanaryService(config, ra.SimulatedSource(), clock=lambda: ra.NOW, events=events)
        with tracer.start_as_current_span("job canary-judge") as judge_span:
            v = asyncio.run(service.evaluate("m0-canary", "m0-stable"))
        assert events.flush()
        got = rx.wait(4)
        events.shutdown()
    assert len(got) == 4 and all(r.event_name == EVENT for r in got)
    assert rx.headers[0]["x-tenant"] == "ml"
    golden = [r for r in got if r.attributes["gen_ai.evaluation.name"] == "golden/factual"]
    verdict = next(r for r in got if r.attributes["gen_ai.evaluation.name"] == "canary_verdict")
    labels = {r.attributes["observer.golden.item"]: r.attributes["gen_ai.evaluation.score.label"] for r in golden}
    assert labels == {"q1": "pass", "q2": "fail", "q3": "error"}
    q2 = next(r for r in golden if r.attributes["observer.golden.item"] == "q2")
    assert q2.attributes["gen_ai.evaluation.score.value"] == 0.0
    assert q2.attributes["gen_ai.evaluation.explanation"] == "exact: expected 'Paris'"
    assert q2.attributes["observer.evaluator.model"] == "judge-7b"
    assert q2.attributes["observer.reference_set.hash"] == "sha256:0123456789abcdef"
    # the proposal's provenance names, beside their observer.* aliases
    assert q2.attributes["gen_ai.evaluation.reference_set.id"] == q2.attributes["observer.reference_set"]
    assert q2.attributes["gen_ai.evaluation.reference_set.version"] == "sha256:0123456789abcdef"
    assert q2.attributes["gen_ai.evaluation.evaluator.type"] == "llm_judge"
    assert q2.attributes["gen_ai.evaluation.evaluator.version"] == "v3"
    assert q2.attributes["gen_ai.evaluation.evaluator.id"] == "observer/golden"
    q3 = next(r for r in golden if r.attributes["observer.golden.item"] == "q3")
    assert q3.attributes["error.type"] == "request_error" and "gen_ai.evaluation.score.value" not in q3.attributes
    assert verdict.attributes["gen_ai.evaluation.score.label"] == str(v.verdict) == "fail"
    assert verdict.attributes["gen_ai.evaluation.score.value"] == pytest.approx(v.score)
    assert verdict.attributes["observer.failed_metrics"] == "errors"
    assert verdict.attributes["observer.evaluator.model"] == "judge-7b"
    assert verdict.attributes["gen_ai.evaluation.evaluator.type"] == "deterministic"
    assert verdict.attributes["gen_ai.evaluation.evaluator.id"] == "observer/canary_verdict"
    # each event is parented to the span it was emitted in
    golden_ctx = golden_span.get_span_context()
    assert {(r.trace_id, r.span_id) for r in golden} == {(f"{golden_ctx.trace_id:032x}", f"{golden_ctx.span_id:016x}")}
    judge_ctx = judge_span.get_span_context()
    assert (verdict.trace_id, verdict.span_id) == (f"{judge_ctx.trace_id:032x}", f"{judge_ctx.span_id:016x}")
    # every convention attribute used is one the conventions define for this event; the rest are observer.*
    defined = convention_attributes()
    assert set(CONVENTION_ATTRIBUTES) <= defined, set(CONVENTION_ATTRIBUTES) - defined
    for r in got:
        keys = set(r.attributes)
        assert "gen_ai.evaluation.name" in keys
        assert {k for k in keys if not k.startswith("observer.")} <= defined | set(PROPOSED_ATTRIBUTES), keys - defined
    assert got[0].resource["service.name"] == "observer"
    assert events.counts["exported"] == 4 and events.counts["failed"] == 0


def test_endpoint_down_is_counted_and_never_blocks() -> None:
    from tests.support.prom import free_port

    events = EvaluationEvents(spec(f"http://127.0.0.1:{free_port()}/v1/logs", timeout_seconds=1.0),
                              schedule_delay_millis=50)
    t0 = time.perf_counter()
    for _ in range(30):
        emit_golden(events, golden_run())
    assert time.perf_counter() - t0 < 1.0  # 90 events queued, none waited on
    events.flush(10_000)
    deadline = time.monotonic() + 20
    while events.counts["failed"] < 90 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert events.counts["failed"] == 90 and events.counts["exported"] == 0
    text = generate_latest(_registry(events)).decode()
    assert 'observer_evaluation_events_total{outcome="failed"} 90.0' in text
    events.shutdown()


def test_slow_endpoint_drops_beyond_the_queue_and_refusals_count_as_failed() -> None:
    with otlp_logs_receiver() as rx:
        rx.delay = 1.0
        events = EvaluationEvents(spec(rx.url, queue_size=10, timeout_seconds=5.0), schedule_delay_millis=20)
        t0 = time.perf_counter()
        for _ in range(20):
            emit_golden(events, golden_run())  # 60 events, at most 10 waiting
        assert time.perf_counter() - t0 < 1.0
        assert events.counts["dropped"] >= 50
        events.flush(15_000)
        rx.delay = 0.0
        rx.status = 503
        emit_golden(events, golden_run())
        events.flush(15_000)
        events.shutdown()
    c = events.counts
    assert c["exported"] + c["failed"] + c["dropped"] == 63 and c["failed"] >= 3


def test_sample_rate_thins_scores_never_verdicts() -> None:
    with otlp_logs_receiver() as rx:
        events = EvaluationEvents(spec(rx.url, sample_rate=0.0), schedule_delay_millis=50)
        emit_golden(events, golden_run())
        config = parse_config(ra.config_text(1), environ={})
        asyncio.run(CanaryService(config, ra.SimulatedSource(), clock=lambda: ra.NOW, events=events)
                    .evaluate("m0-canary", "m0-stable"))
        events.flush()
        got = rx.wait(1)
        events.shutdown()
    assert [r.attributes["gen_ai.evaluation.name"] for r in got] == ["canary_verdict"]
    assert events.counts["sampled_out"] == 3


def test_enabled_without_an_endpoint_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"telemetry\.evaluations\.enabled needs an endpoint"):
        parse_config("telemetry: {evaluations: {enabled: true}}", environ={})


def _registry(events: EvaluationEvents) -> CollectorRegistry:
    r = CollectorRegistry()
    r.register(events.collector())
    return r


def test_the_root_wires_the_emitter_into_the_canary_service_and_stops_it() -> None:
    import httpx

    from observer.wiring.evaluations import EvaluationsComponent
    from observer.wiring.root import assemble
    from observer.wiring.runtime import Context

    with otlp_logs_receiver() as rx:
        text = ra.config_text(1) + f"telemetry:\n  evaluations: {{enabled: true, endpoint: \"{rx.url}\"}}\n"
        config = parse_config(text.replace("source: prometheus", "source: own"), environ={})
        services = assemble(Context(config=config, http=httpx.AsyncClient()), areas=["canary"])
        component = next(c for c in services.components if isinstance(c, EvaluationsComponent))
        assert services.canary is not None and services.canary.events is component.events
        services.canary.source = ra.SimulatedSource()
        asyncio.run(services.canary.evaluate("m0-canary", "m0-stable"))
        asyncio.run(component.stop())  # flushes
        assert [r.attributes["gen_ai.evaluation.name"] for r in rx.wait(1)] == ["canary_verdict"]
    assert 'observer_evaluation_events_total{outcome="exported"} 1.0' in generate_latest(
        _registry(component.events)).decode()


TP_LIVE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TP_PAIRED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def ids(traceparent: str) -> tuple[str, str]:
    _, trace_id, span_id, _ = traceparent.split("-")
    return trace_id, span_id


async def test_live_checks_judge_looks_and_shadow_pairs_link_to_the_sampled_requests_trace(tmp_path: Path) -> None:
    """Scores of a sampled request land in that request's trace (the traceparent it carried, stored with the
    sample); a request that carried none gets them under the scoring job's span. One receiver, the real SDK."""
    import httpx

    from observer.analyse.quality.jobs import SharedJudging
    from observer.analyse.quality.judge import JudgeClient
    from observer.analyse.quality.live import LiveScorer
    from observer.analyse.quality.pairwise import PairwiseJudge
    from observer.analyse.quality.prompts import load_prompt, load_rubrics
    from observer.analyse.quality.shadow import ShadowPair, ShadowReplayer
    from observer.analyse.quality.state import QualityState
    from observer.config.fleet import VersionSpec
    from observer.config.quality import LiveSpec, ShadowSpec
    from observer.store.base import SampleRecord
    from observer.store.jobs import ClaimedJob
    from observer.store.sqlite import SqliteStore
    from tests.support.judge_server import run_judge_server
    from tests.support.scripted_openai import ScriptedUpstream

    root = Path(__file__).resolve().parents[2]
    rubric = load_rubrics(root / "evals" / "rubrics")["helpfulness"]
    now = time.time()
    store = SqliteStore(tmp_path / "s.db")
    store.add([SampleRecord(version="canary", prompt="How do I kill a process?", ts=now - 30, finish_reason="stop",
                            output="I'm sorry, but I can't help with that request.", source="proxy",
                            traceparent=TP_LIVE),
               SampleRecord(version="canary", prompt="Capital of France?", output="Paris.", ts=now - 20,
                            finish_reason="stop", source="ingest"),
               SampleRecord(version="stable", prompt="Name a prime.", output="Seven.", ts=now - 10,
                            finish_reason="stop", source="proxy", traceparent=TP_PAIRED)])
    tracer = TracerProvider().get_tracer("test")
    with otlp_logs_receiver() as rx, run_judge_server() as judge_server, ScriptedUpstream() as upstream:
        events = EvaluationEvents(spec(rx.url), schedule_delay_millis=50)
        async with httpx.AsyncClient() as http:
            judge = JudgeClient(http, base_url=judge_server.url, model="scripted", max_retries=0,
                                prompt=load_prompt(root / "evals" / "judge_prompt.yaml"))
            live = LiveScorer(store=store, state=QualityState(versions=["canary"], golden_sets=[],
                                                              live_checks=["empty", "refusal", "invalid_json",
                                                                           "judge"]),
                              # invalid_json applies to no prompt here (none asks for JSON): it sends nothing
                              spec=LiveSpec(checks=["empty", "refusal", "invalid_json"], judge_fraction=1.0),
                              judge=judge,
                              rubric=rubric, events=events)
            with tracer.start_as_current_span("job quality-live") as live_span:
                assert await live.run_once(["canary"]) == 2
            # with a shared store any replica judges a sample as a job: its event is linked the same way
            shared = SharedJudging(store, live, rubric)
            job = ClaimedJob(id=1, kind="judge", key="judge:helpfulness:1", payload={"sample_id": 1}, attempt=1,
                             worker="w", lease_until=now + 60)
            assert (await shared.judge(job)).scores[0].passed is False
            pairwise = PairwiseJudge(JudgeClient(http, base_url=judge_server.url, model="scripted", max_retries=0,
                                                 prompt=load_prompt(root / "evals" / "pairwise_prompt.yaml")),
                                     load_prompt(root / "evals" / "pairwise_prompt.yaml"), rubric)
            canary = VersionSpec(name="canary", role="canary", vllm=["http://c/metrics"], openai=upstream.url + "/v1",
                                 model="m")
            stable = VersionSpec(name="stable", role="stable", vllm=["http://s/metrics"], model="m")
            shadow = ShadowReplayer(http=http, spec=ShadowSpec(enabled=True, baseline="stored", rules=["refusal"]),
                                    store=store, judge=pairwise, events=events,
                                    pairs=lambda: [ShadowPair(canary=canary, baseline=stable,
                                                              canary_url=upstream.url + "/v1", baseline_url=None)])
            assert await shadow.run_once() == 1
        assert events.flush()
        got = rx.wait(9)
        events.shutdown()
    store.close()
    looks = [r for r in got if r.attributes["gen_ai.evaluation.name"] == "judge/helpfulness"
             and r.attributes["observer.sample.id"] == 1]
    assert len(looks) == 2 and all((r.trace_id, r.span_id) == ids(TP_LIVE) for r in looks)  # the pass's, the job's
    got.remove(looks[1])
    by = {(r.attributes["gen_ai.evaluation.name"], r.attributes.get("observer.sample.id")): r for r in got}
    assert len(got) == 8 == len(by)
    refused, plain, prime = 1, 2, 3  # sample ids in insertion order
    # the refused request's checks sit in its own trace, under the span that sent it
    for name in ("live/empty", "live/refusal", "judge/helpfulness"):
        r = by[(name, refused)]
        assert (r.trace_id, r.span_id) == ids(TP_LIVE), name
        assert r.attributes["observer.version"] == "canary" and r.attributes["observer.sample.source"] == "proxy"
    assert by[("live/refusal", refused)].attributes["gen_ai.evaluation.score.label"] == "fail"
    assert by[("live/empty", refused)].attributes["gen_ai.evaluation.score.label"] == "pass"
    judged = by[("judge/helpfulness", refused)].attributes
    assert judged["gen_ai.evaluation.score.label"] == "fail"
    assert judged["observer.evaluator.model"] == "scripted" and judged["observer.evaluator.rubric_hash"] == rubric.hash
    assert judged["observer.evaluator.prompt_hash"]
    assert judged["gen_ai.evaluation.evaluator.type"] == "llm_judge"
    assert by[("live/refusal", refused)].attributes["gen_ai.evaluation.evaluator.type"] == "deterministic"
    assert by[("live/refusal", refused)].attributes["gen_ai.evaluation.evaluator.id"] == "observer/live/refusal"
    # a request that carried no trace context: its scores go under the job that scored them
    live_ctx = live_span.get_span_context()
    for name in ("live/empty", "live/refusal", "judge/helpfulness"):
        r = by[(name, plain)]
        assert (r.trace_id, r.span_id) == (f"{live_ctx.trace_id:032x}", f"{live_ctx.span_id:016x}"), name
        assert r.attributes["gen_ai.evaluation.score.label"] == "pass"
    # the shadow pair made from the stable request: in that request's trace, from the canary's side
    paired, paired_judge = by[("paired/refusal", prime)], by[("paired_judge/helpfulness", prime)]
    for r in (paired, paired_judge):
        assert (r.trace_id, r.span_id) == ids(TP_PAIRED)
        assert r.attributes["observer.version"] == "canary" and r.attributes["observer.baseline"] == "stable"
    assert paired.attributes["gen_ai.evaluation.score.label"] == "tie"
    assert paired.attributes["gen_ai.evaluation.score.value"] == 0.5
    assert paired_judge.attributes["gen_ai.evaluation.score.label"] in ("win", "loss", "tie", "inconsistent")
    assert paired_judge.attributes["observer.evaluator.rubric"] == "helpfulness"
    assert paired_judge.attributes["gen_ai.evaluation.evaluator.type"] == "llm_judge"
    assert paired_judge.attributes["gen_ai.evaluation.evaluator.id"] == "observer/paired_judge/helpfulness"
    assert paired.attributes["gen_ai.evaluation.evaluator.type"] == "deterministic"
    defined = convention_attributes()
    for r in got:
        assert {k for k in r.attributes if not k.startswith("observer.")} <= defined | set(PROPOSED_ATTRIBUTES)
    assert events.counts["exported"] == 9
