"""GenAI client spans into samples without a server: decoding (array attributes, resource attributes),
the version from an attribute or the model, the fraction, and what is counted instead of stored."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from observer.collect.otlp import decode_export
from observer.sample.genai import GenAiSource
from observer.sample.metrics import SamplingMetrics
from observer.sample.redact import Redactor
from observer.store.sqlite import SqliteStore

TRACE, SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"


def export(*spans: dict[str, object], resource: dict[str, str] | None = None) -> bytes:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    for k, v in (resource or {}).items():
        kv = rs.resource.attributes.add()
        kv.key, kv.value.string_value = k, v
    scope = rs.scope_spans.add()
    for attrs in spans:
        span = scope.spans.add()
        span.name, span.start_time_unix_nano, span.end_time_unix_nano = "chat m", 10**18, 10**18 + 2 * 10**9
        span.trace_id, span.span_id, span.flags = bytes.fromhex(TRACE), bytes.fromhex(SPAN), 0x301
        for k, v in attrs.items():
            kv = span.attributes.add()
            kv.key = k
            if isinstance(v, tuple):
                for item in v:
                    kv.value.array_value.values.add().string_value = item
            elif isinstance(v, int):
                kv.value.int_value = v
            else:
                kv.value.string_value = str(v)
    return request.SerializeToString()


def chat(model: str = "m-canary", **extra: object) -> dict[str, object]:
    parts = [{"type": "text", "content": "mail jo@example.com"}, {"type": "image", "uri": "x"}]
    return {"gen_ai.operation.name": "chat", "gen_ai.request.model": model,
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": parts}]),
            "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]),
            "gen_ai.response.finish_reasons": ("stop",), "gen_ai.usage.input_tokens": 7,
            "gen_ai.usage.output_tokens": 1, "gen_ai.request.temperature": "0.2", **extra}


def source(tmp_path: Path, **kw: object) -> tuple[GenAiSource, SqliteStore, SamplingMetrics]:
    store = SqliteStore(tmp_path / "s.db")
    metrics = SamplingMetrics()
    args: dict[str, object] = {"models": {"m-canary": "canary"}, "version_attribute": None, **kw}
    return GenAiSource(store=store, metrics=metrics, redactor=Redactor.build(), versions={"stable", "canary"},
                       fraction=lambda v: 1.0, seed=0, **args), store, metrics  # type: ignore[arg-type]


def test_a_chat_span_becomes_a_redacted_sample(tmp_path: Path) -> None:
    genai, store, metrics = source(tmp_path)
    decoded = decode_export(export(chat(), {"gen_ai.operation.name": "embeddings"}),
                            content_type="application/x-protobuf", max_bytes=10**6)
    assert len(decoded.genai) == 1 and decoded.other == 1
    genai.receive(decoded)
    asyncio.run(genai.commit())
    (sample,) = store.samples("canary")
    assert sample.prompt == "mail <EMAIL>\n[image]" and sample.output == "ok" and sample.source == "otel"
    assert (sample.finish_reason, sample.prompt_tokens, sample.output_tokens, sample.latency_s) == ("stop", 7, 1, 2.0)
    assert genai.outcomes == {"stored": 1} and metrics.stored["canary"] == 1
    # the span's own context (W3C flags: the low byte of OTLP's), so the sample's scores link back to it
    assert sample.traceparent == f"00-{TRACE}-{SPAN}-01"
    store.close()


def test_version_from_a_resource_attribute_and_what_is_not_stored(tmp_path: Path) -> None:
    genai, store, _ = source(tmp_path, version_attribute="service.version")
    no_content = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    body = export(chat(), chat(**{"gen_ai.output.messages": "[1, 2]"}), no_content,
                  resource={"service.version": "stable"})
    genai.receive(decode_export(body, content_type="application/x-protobuf", max_bytes=10**6))
    genai.receive(decode_export(export(chat(), resource={"service.version": "v-unknown"}),
                                content_type="application/x-protobuf", max_bytes=10**6))
    asyncio.run(genai.commit())
    assert genai.outcomes == {"stored": 1, "unreadable": 1, "no_content": 1, "unknown_version": 1}
    assert store.count("stable") == 1
    store.close()
