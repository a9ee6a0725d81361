"""OpenTelemetry tracing of the observer's own periodic jobs (console or OTLP, by config)."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

from observer import __version__
from observer.config.fleet import TelemetrySpec


def build_tracer(spec: TelemetrySpec, *, exporter: SpanExporter | None = None) -> trace.Tracer:
    """Return a tracer exporting as `spec` says; `exporter` overrides it (tests pass an in-memory one)."""
    provider = TracerProvider(resource=Resource.create({"service.name": "observer",
                                                        "service.version": __version__}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    elif spec.traces == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif spec.traces == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        otlp = OTLPSpanExporter(endpoint=spec.otlp_endpoint) if spec.otlp_endpoint else OTLPSpanExporter()
        provider.add_span_processor(BatchSpanProcessor(otlp))
    return provider.get_tracer("observer")
