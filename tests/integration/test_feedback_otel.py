"""Users' feedback as OpenTelemetry `gen_ai.evaluation.result` events: the OpenTelemetry SDK's own OTLP/HTTP log
exporter sends them to a real observer's `/v1/logs`; the evaluations the config names as the users' are joined to
sampled answers by response id or by trace context and counted like the JSON API's events; a model judge's
evaluation, an ordinary log record and an answer nobody sampled are counted or ignored, never stored; a retried
export is a duplicate; a body that is not an export is a 400 the exporter does not retry."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord as ProtoLogRecord
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import TraceFlags

from observer.config import parse_config
from tests.support.observer_proc import ObserverProcess, run_observer
from tests.support.prom import metric

pytestmark = pytest.mark.integration

TOKEN = "feedback-otel"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
EVENT = "gen_ai.evaluation.result"


@pytest.fixture
def observer(tmp_path: Path) -> Iterator[ObserverProcess]:
    config = parse_config(f"""
fleet:
  versions:
    - {{name: stable, openai: "http://127.0.0.1:9/v1"}}
    - {{name: canary, openai: "http://127.0.0.1:9/v1"}}
server: {{auth_token: {TOKEN}}}
sampling:
  store: {{path: "{tmp_path / 'samples.db'}"}}
  feedback:
    otel_evaluations: {{user_thumbs: thumbs, user_rating: rating}}
""", environ={})
    with run_observer(config, areas=["sample"]) as obs:
        now = time.time()
        samples = [{"version": "canary", "prompt": "q1", "output": "a1", "ts": now - 30, "response_id": "chatcmpl-c1"},
                   {"version": "canary", "prompt": "q2", "output": "a2", "ts": now - 30, "response_id": "chatcmpl-c2"},
                   {"version": "stable", "prompt": "q3", "output": "a3", "ts": now - 30,
                    "traceparent": f"00-{TRACE:032x}-00f067aa0ba902b7-01"}]
        r = httpx.post(obs.url + "/api/v1/samples", json={"samples": samples}, headers=AUTH, timeout=10)
        assert r.status_code == 200, r.text
        yield obs


def feedback(obs: ObserverProcess, **labels: str) -> float:
    return metric(obs.url, "observer_feedback_events_total", **labels)


def refused(obs: ObserverProcess, reason: str) -> float:
    return metric(obs.url, "observer_feedback_rejected_total", reason=reason)


def test_the_sdks_evaluation_events_count_as_the_users_feedback(observer: ObserverProcess) -> None:
    provider = LoggerProvider(resource=Resource.create({"service.name": "chat-frontend"}))
    provider.add_log_record_processor(SimpleLogRecordProcessor(
        OTLPLogExporter(endpoint=observer.url + "/v1/logs", headers=AUTH, timeout=10)))
    logger = provider.get_logger("chat-frontend.feedback")
    try:
        # A thumbs-down by value and a thumbs-up by label, joined by the answer's response id.
        logger.emit(event_name=EVENT, attributes={"gen_ai.evaluation.name": "user_thumbs",
                                                  "gen_ai.evaluation.score.value": 0.0,
                                                  "gen_ai.response.id": "chatcmpl-c1",
                                                  "gen_ai.evaluation.explanation": "wrong, call me on 555-0100"})
        logger.emit(event_name=EVENT, attributes={"gen_ai.evaluation.name": "user_thumbs",
                                                  "gen_ai.evaluation.score.label": "thumbs_up",
                                                  "gen_ai.response.id": "chatcmpl-c2"})
        # A rating joined by its trace context: parented to the answered request, as the convention asks.
        logger.emit(LogRecord(event_name=EVENT, trace_id=TRACE, span_id=0x00F067AA0BA902B7,
                              trace_flags=TraceFlags(1),
                              attributes={"gen_ai.evaluation.name": "user_rating",
                                          "gen_ai.evaluation.score.value": 5.0}))
        # A model judge's evaluation (same event, a name the config does not give the users), an ordinary log
        # record, and a thumbs on an answer nobody sampled.
        logger.emit(event_name=EVENT, attributes={"gen_ai.evaluation.name": "relevance",
                                                  "gen_ai.evaluation.score.value": 0.2,
                                                  "gen_ai.response.id": "chatcmpl-c1"})
        logger.emit(body="user opened the settings page")
        logger.emit(event_name=EVENT, attributes={"gen_ai.evaluation.name": "user_thumbs",
                                                  "gen_ai.evaluation.score.value": 1.0,
                                                  "gen_ai.response.id": "chatcmpl-nobody"})
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()
    assert feedback(observer, version="canary", kind="thumbs", outcome="negative") == 1
    assert feedback(observer, version="canary", kind="thumbs", outcome="positive") == 1
    assert feedback(observer, version="stable", kind="rating", outcome="positive") == 1
    assert refused(observer, "not_feedback") == 1 and refused(observer, "unknown_response") == 1
    exposition = httpx.get(observer.url + "/metrics", timeout=10).text
    assert "555-0100" not in exposition and "chatcmpl-" not in exposition  # comments and ids never exported


def _export(name: str, value: float, response_id: str) -> bytes:
    def kv(key: str, v: AnyValue) -> KeyValue:
        return KeyValue(key=key, value=v)

    record = ProtoLogRecord(time_unix_nano=time.time_ns(), event_name=EVENT, attributes=[
        kv("gen_ai.evaluation.name", AnyValue(string_value=name)),
        kv("gen_ai.evaluation.score.value", AnyValue(double_value=value)),
        kv("gen_ai.response.id", AnyValue(string_value=response_id))])
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.append(record)
    return request.SerializeToString()


def _post(obs: ObserverProcess, body: bytes, content_type: str = "application/x-protobuf") -> httpx.Response:
    return httpx.post(obs.url + "/v1/logs", content=body, timeout=10,
                      headers={**AUTH, "Content-Type": content_type})


def test_a_retried_export_is_a_duplicate_and_a_refusal_is_a_partial_success(observer: ObserverProcess) -> None:
    body = _export("user_rating", 1.0, "chatcmpl-c1")
    first, again = _post(observer, body), _post(observer, body)
    for r in (first, again):
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-protobuf"
        assert ExportLogsServiceResponse.FromString(r.content).partial_success.rejected_log_records == 0
    assert feedback(observer, version="canary", kind="rating", outcome="negative") == 1
    assert refused(observer, "duplicate") == 1
    off = ExportLogsServiceResponse.FromString(_post(observer, _export("user_rating", 9.0, "chatcmpl-c2")).content)
    assert off.partial_success.rejected_log_records == 1
    assert off.partial_success.error_message.startswith("off_scale: rating 9.0 is off the scale [1, 5]")


def test_a_body_that_is_not_an_export_is_a_400_naming_why(observer: ObserverProcess) -> None:
    r = _post(observer, b'{"resourceLogs": "nope"}', "application/json")
    assert r.status_code == 400 and "resourceLogs must be a list of objects" in r.json()["message"]
    assert _post(observer, b"\x00\xff garbage").status_code == 400
    assert httpx.post(observer.url + "/v1/logs", content=b"", timeout=10).status_code in (401, 403)
