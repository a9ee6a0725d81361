"""Scores and verdicts as OpenTelemetry GenAI `gen_ai.evaluation.result` events (the conventions' event for an
evaluator's result; Development status), exported over OTLP/HTTP by the SDK's log exporter.

The conventions name the result (`gen_ai.evaluation.name`, `score.value`, `score.label`, `explanation`,
`gen_ai.response.id`, `error.type`). Who evaluated and against what are in a proposal (`gen_ai.evaluation.
evaluator.id`/`.type`/`.version`, `gen_ai.evaluation.reference_set.id`/`.version`, PROPOSED_ATTRIBUTES): those
are set too, beside the `observer.*` attributes that carry them and the rest (the evaluator's model and prompt and
rubric hashes, the version evaluated, the canary pair), which stay as aliases until the proposal settles.

An event about a sampled request (a live check, the judge's look at it, a shadow pair made from it) is linked
to the trace and span the request carried (its stored W3C traceparent), so a trace backend shows the score
inside the request's own trace. Any other event (a golden item, a verdict), or one whose request carried no
trace context, is parented to the span current when it is emitted: the job span of the run that scored it.

Emitting never blocks and never raises: events beyond `queue_size` still waiting for export are dropped and
counted; an endpoint that is down or slow costs failed exports, counted, and nothing else.
"""

from __future__ import annotations

import logging
import random
import threading
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from observer import __version__
from observer import conventions as names
from observer.config.fleet import EvaluationEventsSpec

log = logging.getLogger("observer.evalevents")

EVENT = "gen_ai.evaluation.result"
NAME = "gen_ai.evaluation.name"
SCORE_VALUE = "gen_ai.evaluation.score.value"
SCORE_LABEL = "gen_ai.evaluation.score.label"
EXPLANATION = "gen_ai.evaluation.explanation"
RESPONSE_ID = "gen_ai.response.id"
ERROR_TYPE = "error.type"
CONVENTION_ATTRIBUTES = (NAME, SCORE_VALUE, SCORE_LABEL, EXPLANATION, RESPONSE_ID, ERROR_TYPE)
"""Every convention attribute the observer sets; the rest are `observer.*`."""

EVALUATOR_ID = "gen_ai.evaluation.evaluator.id"
EVALUATOR_TYPE = "gen_ai.evaluation.evaluator.type"
EVALUATOR_VERSION = "gen_ai.evaluation.evaluator.version"
REFERENCE_SET_ID = "gen_ai.evaluation.reference_set.id"
REFERENCE_SET_VERSION = "gen_ai.evaluation.reference_set.version"
PROPOSED_ATTRIBUTES = (EVALUATOR_ID, EVALUATOR_TYPE, EVALUATOR_VERSION, REFERENCE_SET_ID, REFERENCE_SET_VERSION)
"""Evaluator and reference-set provenance as OpenTelemetry's GenAI proposal names them (semantic-conventions-genai
PR #359, not merged): set beside their `observer.*` aliases, which stay until the proposal settles."""

LLM_JUDGE, DETERMINISTIC = "llm_judge", "deterministic"
"""The proposal's evaluator types: what decides the result (a judge model, or code: rule checks, golden
assertions without a judge, the canary's statistical tests)."""

OUTCOMES = ("exported", "failed", "dropped", "sampled_out")
MAX_EXPLANATION = 1000


@dataclass(frozen=True)
class Evaluation:
    """One evaluator's result about one thing (a golden item's answer, a canary pair's look)."""

    name: str
    label: str
    score: float | None = None
    explanation: str = ""
    response_id: str | None = None
    error_type: str | None = None
    attributes: Mapping[str, str | int | float | bool] = field(default_factory=dict)
    """`observer.*` attributes: version, evaluator identity, reference set."""
    traceparent: str | None = None
    """The W3C traceparent of the request this evaluates; None: the current span's."""

    def otel_attributes(self) -> dict[str, Any]:
        out: dict[str, Any] = {NAME: self.name, SCORE_LABEL: self.label}
        if self.score is not None:
            out[SCORE_VALUE] = float(self.score)
        if self.explanation:
            out[EXPLANATION] = self.explanation[:MAX_EXPLANATION]
        if self.response_id:
            out[RESPONSE_ID] = self.response_id
        if self.error_type:
            out[ERROR_TYPE] = self.error_type
        out.update({k: v for k, v in self.attributes.items() if k.startswith("observer.") and v != ""})
        out.update(provenance(self.name, out))
        return out


def provenance(name: str, attributes: Mapping[str, Any]) -> dict[str, Any]:
    """The proposal's provenance attributes of an event named `name` (`golden/<set>`, `live/<check>`,
    `judge/<rubric>`, `paired/<check>`, `paired_judge/<rubric>`, `canary_verdict`) from its `observer.*` ones:
    the evaluator's id (the observer's evaluation, by kind and check), its type and version (the judge's prompt
    version when a judge model decided, else this observer's version), and the golden set with its hash."""
    kind = name.split("/", 1)[0]
    judged = kind in ("judge", "paired_judge") or (kind == "golden" and "observer.evaluator.model" in attributes)
    out: dict[str, Any] = {EVALUATOR_ID: f"observer/{name}" if kind != "golden" else "observer/golden",
                           EVALUATOR_TYPE: LLM_JUDGE if judged else DETERMINISTIC}
    version = attributes.get("observer.evaluator.prompt_version") if judged else __version__
    if version:
        out[EVALUATOR_VERSION] = str(version)
    if attributes.get("observer.reference_set"):
        out[REFERENCE_SET_ID] = attributes["observer.reference_set"]
        if attributes.get("observer.reference_set.hash"):
            out[REFERENCE_SET_VERSION] = attributes["observer.reference_set.hash"]
    return out


def linked(traceparent: str | None) -> Context | None:
    """A context whose span is the one `traceparent` names (remote: the request's), or None (the current
    context) when there is none or it is malformed; the store and ingest validated it, so this is a backstop."""
    if not traceparent:
        return None
    parts = traceparent.strip().split("-")
    if len(parts) != 4 or [len(p) for p in parts] != [2, 32, 16, 2]:
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if not trace_id or not span_id:
        return None
    span = NonRecordingSpan(SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(flags)))
    return trace.set_span_in_context(span)


class _Counting(LogRecordExporter):
    """The OTLP exporter, counting what it exported and failed, and releasing the queue's slots."""

    def __init__(self, inner: LogRecordExporter, events: EvaluationEvents) -> None:
        self.inner = inner
        self.events = events

    def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
        try:
            result = self.inner.export(batch)
        except Exception as e:  # an exporter bug must not kill the export thread
            log.warning("evaluation events: export raised %s: %s", type(e).__name__, e)
            result = LogRecordExportResult.FAILURE
        ok = result == LogRecordExportResult.SUCCESS
        self.events.settled(len(batch), "exported" if ok else "failed")
        if not ok:
            self.events.warn_failed(len(batch))
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()  # type: ignore[no-untyped-call]

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class EvaluationEvents:
    """Emits evaluation events through the OTel SDK's batching log processor, bounded by `spec.queue_size`."""

    def __init__(self, spec: EvaluationEventsSpec, *, exporter: LogRecordExporter | None = None,
                 seed: int | None = None, schedule_delay_millis: int = 1000) -> None:
        self.spec = spec
        self.counts: Counter[str] = Counter({o: 0 for o in OUTCOMES})
        self._pending = 0
        self._lock = threading.Lock()
        self._rng = random.Random(seed)
        self._failed_logged = False
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter

            exporter = OTLPLogExporter(endpoint=spec.endpoint, headers=dict(spec.headers),
                                       timeout=spec.timeout_seconds)
        self.provider = LoggerProvider(resource=Resource.create({"service.name": "observer",
                                                                 "service.version": __version__}))
        # The processor's own queue is larger than ours: ours decides, and counts, what is dropped.
        self.provider.add_log_record_processor(BatchLogRecordProcessor(
            _Counting(exporter, self), max_queue_size=spec.queue_size + 512,
            max_export_batch_size=min(512, spec.queue_size), schedule_delay_millis=schedule_delay_millis,
            export_timeout_millis=int(spec.timeout_seconds * 1000)))
        self.logger = self.provider.get_logger("observer.evaluations", __version__)

    def settled(self, n: int, outcome: str) -> None:
        with self._lock:
            self._pending = max(0, self._pending - n)
            self.counts[outcome] += n

    def warn_failed(self, n: int) -> None:
        if not self._failed_logged:  # once per outage, not once per batch
            self._failed_logged = True
            log.warning("evaluation events: %d could not be exported to %s (down or slow; counted in "
                        "%s_total{outcome=\"failed\"})", n, self.spec.endpoint, names.EVALUATION_EVENTS)

    def emit(self, e: Evaluation, *, sampled: bool = True) -> bool:
        """Queue one event (never blocks or raises). `sampled`: subject to `sample_rate` (per-item scores).
        False when it was sampled out or dropped because the queue is full."""
        if sampled and self.spec.sample_rate < 1.0 and self._rng.random() >= self.spec.sample_rate:
            with self._lock:
                self.counts["sampled_out"] += 1
            return False
        with self._lock:
            if self._pending >= self.spec.queue_size:
                self.counts["dropped"] += 1
                return False
            self._pending += 1
        try:
            self.logger.emit(event_name=EVENT, body=None, attributes=e.otel_attributes(),
                             context=linked(e.traceparent))
        except Exception as err:  # the SDK must never fail a scoring run
            self.settled(1, "failed")
            log.warning("evaluation events: emit raised %s: %s", type(err).__name__, err)
            return False
        return True

    def flush(self, timeout_millis: int = 5000) -> bool:
        return bool(self.provider.force_flush(timeout_millis))

    def shutdown(self) -> None:
        self.provider.shutdown()

    def collector(self) -> Collector:
        return _EventsCollector(self)


class _EventsCollector(Collector):
    def __init__(self, events: EvaluationEvents) -> None:
        self.events = events

    def collect(self) -> Iterator[CounterMetricFamily]:
        c = CounterMetricFamily(names.EVALUATION_EVENTS, "OTel GenAI evaluation events by outcome (exported, "
                                "failed: the endpoint refused or timed out, dropped: the queue was full, "
                                "sampled_out).", labels=[names.OUTCOME])
        for outcome in OUTCOMES:
            c.add_metric([outcome], float(self.events.counts[outcome]))
        yield c
