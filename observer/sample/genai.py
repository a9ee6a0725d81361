"""Applications' OpenTelemetry GenAI client spans as samples (`sampling.otel_genai`).

A `chat` or `text_completion` span that carries its content (`gen_ai.input.messages` and
`gen_ai.output.messages`, JSON in the GenAI semantic conventions: messages of typed `parts`) becomes a
sample of source `otel`, under the version its `version_attribute` names (a span or resource attribute)
or its `gen_ai.request.model` through `models`. The version must be one the fleet defines: any other is
counted and dropped, never a new label value. The sampling fraction applies per version, and redaction
before storage, as for every sample. Everything a span can fail on is counted by outcome in
`observer_otel_genai_spans_total`; the export itself is always answered.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from observer import conventions as names
from observer.collect.otlp import GenAiSpan, TraceExport, Value
from observer.conventions import fingerprint
from observer.sample.capture import CaptureError, render_messages
from observer.sample.conversation import Keyer
from observer.sample.metrics import SamplingMetrics
from observer.sample.pipeline import redact_records
from observer.sample.redact import Redactor
from observer.store.base import SampleRecord, SampleStore

OUTCOMES = ("stored", "not_sampled", "no_content", "unknown_version", "unreadable", "store_error")
"""What became of a GenAI span: stored as a sample; left out by the sampling fraction; sent without its
messages (content capture off); naming no version the fleet defines; messages that are not the GenAI
conventions' JSON; the store failed."""
MAX_TEXT = 1_000_000  # characters of a prompt or reply, as at ingest
_SAMPLING = ("temperature", "top_p", "top_k", "max_tokens", "seed", "frequency_penalty", "presence_penalty",
             "stop_sequences")


class GenAiUnreadable(CaptureError):
    """A span's messages are not the GenAI conventions' JSON."""


def _messages(raw: Value, name: str) -> list[dict[str, Any]]:
    if not isinstance(raw, str) or len(raw) > 4 * MAX_TEXT:
        raise GenAiUnreadable(f"{name} is not a JSON string of at most {4 * MAX_TEXT} characters")
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as e:
        raise GenAiUnreadable(f"{name} is not JSON: {e}") from e
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        raise GenAiUnreadable(f"{name} is not a list of messages")
    return value


def _text(message: Mapping[str, Any]) -> str:
    """A message's text: its text parts in order, a `[type]` marker for the others (tool calls, media)."""
    out = []
    for part in message.get("parts") or ():
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("content"), str):
            out.append(part["content"])
        elif isinstance(part.get("type"), str):
            out.append(f"[{part['type']}]")
    return "\n".join(out)


def to_record(span: GenAiSpan, version: str, keyer: Keyer | None = None) -> SampleRecord:
    """The sample of one GenAI span with content; GenAiUnreadable when its messages cannot be read. Its
    `gen_ai.conversation.id` (span or resource) is the conversation, kept as `keyer` keys it."""
    a = span.attributes
    inputs = _messages(a.get("gen_ai.input.messages"), "gen_ai.input.messages")
    outputs = _messages(a.get("gen_ai.output.messages"), "gen_ai.output.messages")
    messages = [{"role": str(m.get("role", "user")), "content": _text(m)} for m in inputs]
    prompt = render_messages(messages) if messages else ""
    output = "\n".join(_text(m) for m in outputs)
    if len(prompt) > MAX_TEXT or len(output) > MAX_TEXT:
        raise GenAiUnreadable(f"a prompt or reply over {MAX_TEXT} characters")
    finish = next((m.get("finish_reason") for m in outputs if isinstance(m.get("finish_reason"), str)), None)
    reasons = a.get("gen_ai.response.finish_reasons")
    if finish is None and isinstance(reasons, tuple) and reasons:
        finish = reasons[0]
    model = a.get("gen_ai.response.model") or a.get("gen_ai.request.model")
    sampling = {k: a[f"gen_ai.request.{k}"] for k in _SAMPLING if a.get(f"gen_ai.request.{k}") is not None}
    latency = span.end_s - span.start_s
    return SampleRecord(
        version=version, prompt=prompt, output=output, ts=span.start_s,
        model=model[:256] if isinstance(model, str) else None,
        finish_reason=finish[:32] if isinstance(finish, str) else None,
        prompt_tokens=_tokens(a.get("gen_ai.usage.input_tokens")),
        output_tokens=_tokens(a.get("gen_ai.usage.output_tokens")),
        latency_s=latency if 0 <= latency <= 86_400 else None, ttft_s=None, source="otel",
        template_hash=fingerprint.messages_template_hash(messages) if messages else None,
        sampling_hash=fingerprint.sampling_hash(sampling) if sampling else None, traceparent=span.traceparent,
        conversation=None if keyer is None else keyer.key(
            a.get("gen_ai.conversation.id", span.resource.get("gen_ai.conversation.id"))))


def _tokens(value: Value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 100_000_000 else None


class GenAiSource:
    """Receives trace exports (as the engine-span join does) and stores the GenAI spans among them."""

    def __init__(self, *, store: SampleStore, metrics: SamplingMetrics, redactor: Redactor | None,
                 versions: Collection[str], fraction: Callable[[str], float], models: Mapping[str, str],
                 version_attribute: str | None, seed: int | None = None, keyer: Keyer | None = None) -> None:
        self.store = store
        self.keyer = keyer
        self.metrics = metrics
        self.redactor = redactor
        self.versions = versions
        self.fraction = fraction
        self.models = dict(models)
        self.version_attribute = version_attribute
        self.outcomes: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._pending: list[SampleRecord] = []

    def version_of(self, span: GenAiSpan) -> str | None:
        """The fleet version a span belongs to, or None."""
        if self.version_attribute is not None:
            value = span.attributes.get(self.version_attribute, span.resource.get(self.version_attribute))
        else:
            model = span.attributes.get("gen_ai.request.model")
            value = self.models.get(model, model) if isinstance(model, str) else None
        return value if isinstance(value, str) and value in self.versions else None

    def receive(self, export: TraceExport) -> None:
        """Turn the export's GenAI spans into samples waiting for `commit` (cheap: no I/O)."""
        for span in export.genai:
            a = span.attributes
            if a.get("gen_ai.input.messages") is None or a.get("gen_ai.output.messages") is None:
                self.outcomes["no_content"] += 1
                continue
            version = self.version_of(span)
            if version is None:
                self.outcomes["unknown_version"] += 1
                continue
            self.metrics.seen[(version, "otel")] += 1
            if self._rng.random() >= self.fraction(version):
                self.outcomes["not_sampled"] += 1
                continue
            try:
                record = to_record(span, version, self.keyer)
            except CaptureError:
                self.outcomes["unreadable"] += 1
                continue
            self.metrics.sampled[(version, "otel")] += 1
            self._pending.append(record)

    async def commit(self) -> None:
        """Store what `receive` made (redacted, in a thread); a store failure is counted, never raised."""
        records, self._pending = self._pending, []
        if not records:
            return
        try:
            counts = await asyncio.to_thread(self._write, records)
        except Exception:  # the exporter is answered regardless; the loss is counted
            self.outcomes["store_error"] += len(records)
            for r in records:
                self.metrics.drop(r.version, "store_error")
            return
        self.metrics.redactions.update(counts)
        self.outcomes["stored"] += len(records)
        for r in records:
            self.metrics.stored[r.version] += 1

    def _write(self, records: Sequence[SampleRecord]) -> Counter[str]:
        redacted, counts = redact_records(self.redactor, records)
        self.store.add(redacted)
        return counts

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily(names.OTEL_GENAI_SPANS, "Applications' GenAI client spans received, by what became "
                                "of them.", labels=[names.OUTCOME])
        for outcome in OUTCOMES:
            c.add_metric([outcome], float(self.outcomes[outcome]))
        yield c
