"""The simulated engine's OTLP request spans, as vLLM exports them when started with `--otlp-traces-endpoint`.

One `llm_request` span per finished request (vllm/v1/engine/output_processor.py, `do_tracing`): kind SERVER,
a child of the caller's W3C `traceparent` (a new trace without one), starting at the request's arrival, with
the engine's latencies as `gen_ai.latency.*` and the token counts as `gen_ai.usage.*`. Sent the way vLLM
sends them: the OpenTelemetry SDK's BatchSpanProcessor and OTLP/HTTP protobuf exporter, in the SDK's own
thread, its queue bounded (2,048 spans; a full queue drops, as vLLM's does).

Durations are real seconds (what the client waited, `time_scale` applied), not the simulated seconds of
`/metrics`: the observer subtracts them from what its proxy measured (observer/sample/spans.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

SCOPE = "vllm.tracing.otel"  # vLLM's instrumenting scope name
_PROPAGATOR = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class TraceTarget:
    """Where the simulated engines send their spans (an observer's or a proxy's `/v1/traces`)."""

    endpoint: str
    token: str | None = None  # sent as `Authorization: Bearer <token>` (the observer's route is private)


@dataclass(frozen=True)
class FinishedRequest:
    """What the engine knows of one request when it finishes: wall-clock times in ns, durations in s."""

    arrival_ns: int
    end_ns: int
    ttft_s: float
    queue_s: float
    prompt_tokens: int
    completion_tokens: int
    max_tokens: int | None = None


class EngineTracer:
    """One simulated version's span exporter (one TracerProvider, as one vLLM process has)."""

    def __init__(self, target: TraceTarget, *, version: str) -> None:
        headers = {"Authorization": f"Bearer {target.token}"} if target.token else None
        self._provider = TracerProvider(resource=Resource.create({"service.name": f"vllm-sim-{version}"}))
        self._provider.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=target.endpoint, headers=headers, timeout=5), schedule_delay_millis=1000))
        self._tracer = self._provider.get_tracer(SCOPE)

    def finished(self, headers: Mapping[str, str], request: FinishedRequest) -> None:
        """Record the span of one finished request; `headers` are the request's (its `traceparent`)."""
        context = _PROPAGATOR.extract({k: v for k, v in headers.items() if k in ("traceparent", "tracestate")})
        e2e = max(0.0, (request.end_ns - request.arrival_ns) / 1e9)
        attributes: dict[str, float | int] = {
            "gen_ai.latency.time_to_first_token": request.ttft_s,
            "gen_ai.latency.e2e": e2e,
            "gen_ai.latency.time_in_queue": request.queue_s,
            "gen_ai.usage.prompt_tokens": request.prompt_tokens,
            "gen_ai.usage.completion_tokens": request.completion_tokens,
        }
        if request.max_tokens is not None:
            attributes["gen_ai.request.max_tokens"] = request.max_tokens
        span = self._tracer.start_span("llm_request", context=context, kind=SpanKind.SERVER,
                                       start_time=request.arrival_ns, attributes=attributes)
        span.end(end_time=request.end_ns)

    def shutdown(self) -> None:
        """Send what is queued (bounded by the exporter's timeout) and stop the exporter's thread."""
        self._provider.shutdown()
