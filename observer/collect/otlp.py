"""Reading OTLP/HTTP trace exports into vLLM's per-request `llm_request` spans.

vLLM started with `--otlp-traces-endpoint URL` exports one `llm_request` span per request (scope
`vllm.tracing.otel`), keeping the caller's `traceparent` trace id, with the engine's own timings as
`gen_ai.latency.*` attributes and token counts as `gen_ai.usage.*` (docs/sampling.md, "Engine spans").
Both OTLP/HTTP encodings are read: `application/x-protobuf` (vLLM's default) and `application/json`, whose
trace and span ids are hex strings (the OTLP JSON mapping), optionally gzip-compressed. Every other span
(vLLM's start-up spans, anyone else's) is counted and dropped. A body that is not an export request raises
`OtlpError` naming what is wrong; nothing of it is kept.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from observer.errors import ObserverError

Value = float | int | str | bool | tuple[str, ...] | None

__all__ = ["ENGINE_SPAN", "EngineSpan", "GenAiSpan", "OtlpError", "TraceExport", "attributes", "decode_export",
           "read_request"]

ENGINE_SPAN = "llm_request"
GENAI_OPERATIONS = frozenset({"chat", "text_completion"})
"""GenAI client spans (OpenTelemetry semantic conventions) that can be samples: a prompt and its reply."""


class OtlpError(ObserverError, ValueError):
    """A trace export that cannot be read; the message says what and is safe to return to the sender."""


@dataclass(frozen=True)
class EngineSpan:
    """One request as the engine saw it: durations in seconds from vLLM's own clock, None when not sent."""

    trace_id: str  # 32 lowercase hex digits, the W3C trace id the request carried
    ttft_s: float | None = None
    e2e_s: float | None = None
    queue_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class GenAiSpan:
    """An application's GenAI client span (`chat`, `text_completion`): its attributes and its resource's
    (scalar values only; the messages stay JSON text until a sample is made of them), and its time span."""

    attributes: dict[str, Value]
    resource: dict[str, Value]
    start_s: float
    end_s: float
    traceparent: str | None = None  # the span's own context, so scores of its sample link back to it


@dataclass(frozen=True)
class TraceExport:
    """What one export request held: the engine spans, the GenAI client spans, how many other spans it
    carried, and how many engine spans were rejected (bad ids or attribute values) with the first reason."""

    spans: tuple[EngineSpan, ...]
    other: int
    rejected: int = 0
    error: str | None = None
    genai: tuple[GenAiSpan, ...] = ()


def read_request(body: bytes, request: Message, *, items: tuple[str, str, str], content_type: str,
                 content_encoding: str = "", max_bytes: int) -> None:
    """Parse an OTLP/HTTP export body (protobuf or JSON, plain or gzip) into `request`; `items` names the JSON
    path to the records whose ids are hex in OTLP JSON (resourceSpans, scopeSpans, spans)."""
    encoding = content_encoding.strip().lower()
    if encoding == "gzip":
        body = _gunzip(body, max_bytes)
    elif encoding not in ("", "identity"):
        raise OtlpError(f"unsupported Content-Encoding {content_encoding!r} (gzip or none)")
    media = content_type.split(";")[0].strip().lower()
    what = request.DESCRIPTOR.name
    if media == "application/x-protobuf":
        try:
            request.ParseFromString(body)
        except DecodeError as e:
            raise OtlpError(f"the body is not an OTLP protobuf {what}: {e}") from e
    elif media == "application/json":
        _parse_json(body, request, items)
    else:
        raise OtlpError(f"unsupported Content-Type {content_type!r} (application/x-protobuf or application/json)")


def decode_export(body: bytes, *, content_type: str, content_encoding: str = "", max_bytes: int) -> TraceExport:
    """The engine spans of an OTLP/HTTP `ExportTraceServiceRequest` body (protobuf or JSON, plain or gzip)."""
    request = ExportTraceServiceRequest()
    read_request(body, request, items=("resourceSpans", "scopeSpans", "spans"), content_type=content_type,
                 content_encoding=content_encoding, max_bytes=max_bytes)
    spans: list[EngineSpan] = []
    genai: list[GenAiSpan] = []
    other = rejected = 0
    error: str | None = None
    for resource, span in _spans(request):
        if span.name != ENGINE_SPAN:
            attributes = _attributes(span.attributes)
            if attributes.get("gen_ai.operation.name") in GENAI_OPERATIONS:
                genai.append(GenAiSpan(attributes, _attributes(resource.attributes),
                                       span.start_time_unix_nano / 1e9, span.end_time_unix_nano / 1e9,
                                       _traceparent(span.trace_id, span.span_id, span.flags)))
            else:
                other += 1
            continue
        try:
            spans.append(_engine_span(span))
        except OtlpError as e:  # one bad span is rejected alone; the rest of the export is kept
            rejected += 1
            error = error or str(e)
    return TraceExport(spans=tuple(spans), other=other, rejected=rejected, error=error, genai=tuple(genai))


def _engine_span(span: Any) -> EngineSpan:
    if len(span.trace_id) != 16 or not any(span.trace_id):
        raise OtlpError(f"an {ENGINE_SPAN} span has a trace id of {len(span.trace_id)} bytes (16, not all zero)")
    a = _attributes(span.attributes)
    return EngineSpan(trace_id=span.trace_id.hex(), ttft_s=_seconds(a, "gen_ai.latency.time_to_first_token"),
                      e2e_s=_seconds(a, "gen_ai.latency.e2e"), queue_s=_seconds(a, "gen_ai.latency.time_in_queue"),
                      prefill_s=_seconds(a, "gen_ai.latency.time_in_model_prefill"),
                      decode_s=_seconds(a, "gen_ai.latency.time_in_model_decode"),
                      prompt_tokens=_count(a, "gen_ai.usage.prompt_tokens"),
                      completion_tokens=_count(a, "gen_ai.usage.completion_tokens"))


def _gunzip(body: bytes, max_bytes: int) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(body, max_bytes + 1)
    except zlib.error as e:
        raise OtlpError(f"Content-Encoding is gzip but the body is not gzip data: {e}") from e
    if len(out) > max_bytes:
        raise OtlpError(f"the body inflates to more than {max_bytes} bytes")
    return out


def _parse_json(body: bytes, request: Message, items: tuple[str, str, str]) -> None:
    what = request.DESCRIPTOR.name
    try:
        doc = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise OtlpError(f"the body is not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise OtlpError(f"the body is not a JSON object (an {what})")
    resources, scopes, records = items
    for rs in _list(doc, resources):
        for ss in _list(rs, scopes):
            for record in _list(ss, records):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if isinstance(record.get(key), str) and record[key]:
                        record[key] = _hex_to_base64(record[key], key)
    try:
        json_format.ParseDict(doc, request, ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise OtlpError(f"the JSON is not an OTLP {what}: {e}") from e


def _list(parent: Any, key: str) -> list[dict[str, Any]]:
    value = parent.get(key, []) if isinstance(parent, dict) else None
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise OtlpError(f"{key} must be a list of objects")
    return value


def _hex_to_base64(value: str, key: str) -> str:
    # The OTLP JSON mapping writes ids as hex, where protobuf's JSON mapping of `bytes` expects base64.
    try:
        raw = bytes.fromhex(value)
    except ValueError as e:
        raise OtlpError(f"{key} {value[:40]!r} is not hex (OTLP JSON writes ids as hex)") from e
    return base64.b64encode(raw).decode()


def _spans(request: ExportTraceServiceRequest) -> Iterator[tuple[Any, Any]]:
    for rs in request.resource_spans:
        for ss in rs.scope_spans:
            for span in ss.spans:
                yield rs.resource, span


def attributes(kvs: Any) -> dict[str, Value]:
    """An OTLP attribute list as a dict: scalars, string arrays as tuples, anything else None."""
    return _attributes(kvs)


def _attributes(kvs: Any) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        which = kv.value.WhichOneof("value")
        if which in ("double_value", "int_value", "string_value", "bool_value"):
            out[kv.key] = getattr(kv.value, which)
        elif which == "array_value":  # e.g. gen_ai.response.finish_reasons: the strings of it
            out[kv.key] = tuple(v.string_value for v in kv.value.array_value.values
                                if v.WhichOneof("value") == "string_value")
        else:
            out[kv.key] = None
    return out


def _traceparent(trace_id: bytes, span_id: bytes, flags: int) -> str | None:
    """The W3C traceparent of a span's context; None when its ids are malformed or zero."""
    if len(trace_id) != 16 or len(span_id) != 8 or not any(trace_id) or not any(span_id):
        return None
    return f"00-{trace_id.hex()}-{span_id.hex()}-{flags & 0xFF:02x}"


def _seconds(attrs: dict[str, Value], name: str) -> float | None:
    value = attrs.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise OtlpError(f"attribute {name} must be a finite number of seconds ≥ 0, not {value!r}")
    return float(value)


def _count(attrs: dict[str, Value], name: str) -> int | None:
    value = attrs.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OtlpError(f"attribute {name} must be an integer ≥ 0, not {value!r}")
    return value
