"""Joining vLLM's engine spans to the requests the proxy forwarded, by W3C trace id.

The proxy sends every request upstream with a `traceparent` (the client's, or a new one); vLLM keeps its
trace id on the request's `llm_request` span. When a proxied generation request ends, the proxy files what
it saw (its TTFT and end-to-end time) under that trace id; when the span arrives over OTLP, the two meet.
The difference is the time a request spends **outside the engine**: the API server's HTTP handling,
tokenization, detokenization and the network — the part vLLM's own histograms cannot see, since they start
when the engine gets the request. A front-end that saturates (one Python process per server) shows here
while every `vllm:` histogram stays flat.

Bounded both ways: at most `max_pending` requests wait for their span (the oldest is given up, counted as
`overflow`), and a request whose span has not come within `wait_seconds` is counted `missing` — the signal
that tracing is off on that server or its spans are lost. Spans that arrive before their request has ended
wait the same way and are counted `unmatched` when nothing claims them. Label values: configured version
names and fixed outcome words; never a trace id.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from observer import conventions as names
from observer.analyse.histogram import Hist
from observer.collect.otlp import EngineSpan, TraceExport

OUTSIDE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
SPAN_OUTCOMES = ("joined", "unmatched", "rejected", "other")
REQUEST_OUTCOMES = ("joined", "missing", "overflow")


@dataclass(frozen=True)
class _Seen:
    version: str
    ttft_s: float | None
    e2e_s: float
    deadline: float


@dataclass(frozen=True)
class _Early:
    span: EngineSpan
    deadline: float


@dataclass
class SpanJoinStats:
    """Counts and outside-engine histograms, keyed by bounded label values."""

    exports: Counter[str] = field(default_factory=Counter)  # HTTP code answered
    spans: Counter[str] = field(default_factory=Counter)  # SPAN_OUTCOMES
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (version, REQUEST_OUTCOMES)
    outside: dict[tuple[str, str], Hist] = field(default_factory=dict)  # (version, ttft | e2e)


class SpanJoin:
    """The meeting point of proxied requests and engine spans; safe to call from any thread."""

    def __init__(self, *, wait_seconds: float = 30.0, max_pending: int = 20_000, versions: Sequence[str] = (),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.versions = tuple(versions)  # their outcome counters start at 0
        self.wait_seconds = wait_seconds
        self.max_pending = max_pending
        self.stats = SpanJoinStats()
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, _Seen] = OrderedDict()
        self._early: OrderedDict[str, _Early] = OrderedDict()

    def request_done(self, trace_id: str, version: str, *, ttft_s: float | None, e2e_s: float) -> None:
        """The proxy finished a generation request of `version` sent upstream under `trace_id` (32 hex)."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            early = self._early.pop(trace_id, None)
            if early is not None:
                self._join(version, ttft_s, e2e_s, early.span)
                return
            if len(self._seen) >= self.max_pending:
                _, oldest = self._seen.popitem(last=False)
                self.stats.requests[(oldest.version, "overflow")] += 1
            self._seen[trace_id] = _Seen(version, ttft_s, e2e_s, now + self.wait_seconds)

    def receive(self, export: TraceExport) -> None:
        """An OTLP export arrived: join each engine span to its request, or keep it a while."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            self.stats.spans["other"] += export.other
            self.stats.spans["rejected"] += export.rejected
            for span in export.spans:
                seen = self._seen.pop(span.trace_id, None)
                if seen is not None:
                    self._join(seen.version, seen.ttft_s, seen.e2e_s, span)
                    continue
                if len(self._early) >= self.max_pending:
                    self._early.popitem(last=False)
                    self.stats.spans["unmatched"] += 1
                self._early[span.trace_id] = _Early(span, now + self.wait_seconds)

    def answered(self, code: int) -> None:
        """Count one export request by the HTTP status it was answered with."""
        with self._lock:
            self.stats.exports[str(code)] += 1

    def pending(self) -> int:
        """Requests still waiting for their span."""
        with self._lock:
            self._expire(self._clock())
            return len(self._seen)

    def _join(self, version: str, ttft_s: float | None, e2e_s: float, span: EngineSpan) -> None:
        self.stats.spans["joined"] += 1
        self.stats.requests[(version, "joined")] += 1
        for part, proxy_s, engine_s in (("ttft", ttft_s, span.ttft_s), ("e2e", e2e_s, span.e2e_s)):
            if proxy_s is None or engine_s is None:
                continue
            h = self.stats.outside.setdefault((version, part), Hist(OUTSIDE_BUCKETS))
            # Two durations from two monotonic clocks: no skew. Below 0 only by the engine's rounding.
            h.observe(max(0.0, proxy_s - engine_s))

    def _expire(self, now: float) -> None:
        while self._seen:
            trace_id, seen = next(iter(self._seen.items()))
            if seen.deadline > now:
                break
            del self._seen[trace_id]
            self.stats.requests[(seen.version, "missing")] += 1
        while self._early:
            trace_id, early = next(iter(self._early.items()))
            if early.deadline > now:
                break
            del self._early[trace_id]
            self.stats.spans["unmatched"] += 1

    def collect(self) -> Iterator[Metric]:
        """The families of this join, from a snapshot (a prometheus_client Collector)."""
        with self._lock:
            self._expire(self._clock())
            exports = dict(self.stats.exports)
            spans = {k: float(self.stats.spans.get(k, 0)) for k in SPAN_OUTCOMES}
            requests = {(v, o): 0.0 for v in self.versions for o in REQUEST_OUTCOMES}
            requests.update({k: float(n) for k, n in self.stats.requests.items()})
            outside = {k: (h.buckets(), h.total) for k, h in self.stats.outside.items()}
        c = CounterMetricFamily(names.OTLP_EXPORTS, "OTLP/HTTP trace export requests received, by the HTTP "
                                "status answered.", labels=[names.CODE])
        for code, count in sorted(exports.items()):
            c.add_metric([code], float(count))
        yield c
        c = CounterMetricFamily(names.OTLP_SPANS, "Spans received over OTLP: engine spans joined to a proxied "
                                "request, unmatched (no proxied request claimed them), rejected (bad ids or "
                                "values), and other spans (not llm_request, dropped).", labels=[names.OUTCOME])
        for outcome, n in spans.items():
            c.add_metric([outcome], n)
        yield c
        c = CounterMetricFamily(names.ENGINE_SPAN_REQUESTS, "Proxied generation requests by whether their engine "
                                "span arrived: joined, missing (not within sampling.engine_spans.wait_seconds), "
                                "overflow (given up: max_pending were waiting).",
                                labels=[names.VERSION, names.OUTCOME])
        for (version, outcome), n in sorted(requests.items()):
            c.add_metric([version, outcome], n)
        yield c
        h = HistogramMetricFamily(names.OUTSIDE_ENGINE, "Time a proxied request spent outside the engine: what "
                                  "the proxy saw minus what vLLM's span says (part ttft or e2e) — API server, "
                                  "tokenization, detokenization, network.", labels=[names.VERSION, names.PART])
        for (version, part), (buckets, total) in sorted(outside.items()):
            h.add_metric([version, part], buckets, total)
        yield h
