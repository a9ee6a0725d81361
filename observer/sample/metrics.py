"""Self-metrics of sampling, ingest, proxy and store, exported through one custom Collector.

Hot-path updates are plain integer increments (no locks, no label lookups in prometheus_client); the
collector builds the families from a snapshot at scrape time. Every label value is bounded: version
names from config, source and drop reasons from fixed tuples, redaction kinds from config, HTTP codes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.histogram import Hist
from observer.conventions import vllm

DROP_REASONS: tuple[str, ...] = (
    "queue_full",  # the storage queue was full
    "window_full",  # displaced by the per-window reservoir cap (sampling, not a failure)
    "too_large",  # the reply exceeded sampling.proxy.max_capture_bytes
    "unparseable",  # the request or reply could not be read as OpenAI JSON / SSE
    "invalid_text",  # text that cannot be stored as UTF-8 (a lone surrogate such as \ud83d)
    "upstream_status",  # the upstream answered non-2xx
    "incomplete",  # the client or the upstream disconnected mid-reply
    "store_error",  # the store (or the remote ingest) failed: down, locked, 5xx
    "rejected",  # the remote ingest refused this sample (HTTP 400/422), alone
    "shutdown",  # still queued when the process stopped
)
CONVERSATION_OUTCOMES = ("kept", "no_secret", "too_long")
"""What became of a conversation key a source gave (observer.sample.conversation)."""
FEEDBACK_REJECT_REASONS = ("invalid", "unknown_response", "duplicate", "late", "off_scale", "flood",
                           "store_error", "not_feedback")
"""Why a feedback event was not counted: malformed, about no sampled response, its id stored before, given
after the late window, a rating or thumb off its scale, past the per-conversation bound, the store failed, an
OpenTelemetry evaluation whose name is not the users' (sampling.feedback.otel_evaluations)."""
FEEDBACK_OUTCOMES = ("negative", "positive")
CLIENTS = ("litellm", "otel", "other")
"""Ingest clients that report what they dropped before it reached the observer (`X-Observer-Client`)."""
CLIENT_DROP_REASONS = ("queue_full", "unknown_version", "rejected", "observer_down", "unreadable", "other")
"""Why such a client dropped samples (`X-Observer-Dropped: reason=n,...`); an unknown reason counts as other."""
ADDED_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
TTFT_BUCKETS = vllm.TTFT_EDGES  # the client-side histograms use vLLM's edges, so the two compare bucket by bucket
E2E_BUCKETS = vllm.REQUEST_EDGES


@dataclass
class SamplingMetrics:
    """Counters and histograms of this area, keyed by bounded label values."""

    seen: Counter[tuple[str, str]] = field(default_factory=Counter)  # (version, source)
    sampled: Counter[tuple[str, str]] = field(default_factory=Counter)
    stored: Counter[str] = field(default_factory=Counter)
    dropped: Counter[tuple[str, str]] = field(default_factory=Counter)  # (version, reason)
    redactions: Counter[str] = field(default_factory=Counter)
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (version, code)
    shadow: Counter[tuple[str, str]] = field(default_factory=Counter)  # (version, code): X-Observer-Shadow
    uncapped: Counter[str] = field(default_factory=Counter)  # version: generation requests without max_tokens
    client_dropped: Counter[tuple[str, str]] = field(default_factory=Counter)  # (client, reason)
    conversation_keys: Counter[str] = field(default_factory=Counter)  # outcome (sample.conversation.OUTCOMES)
    feedback: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (version, kind, outcome)
    feedback_rejected: Counter[str] = field(default_factory=Counter)  # reason (FEEDBACK_REJECT_REASONS)
    added: dict[str, Hist] = field(default_factory=dict)
    ttft: dict[str, Hist] = field(default_factory=dict)
    e2e: dict[str, Hist] = field(default_factory=dict)

    def drop(self, version: str, reason: str, n: int = 1) -> None:
        """Count `n` samples of `version` dropped for `reason` (one of DROP_REASONS)."""
        assert reason in DROP_REASONS, reason
        self.dropped[(version, reason)] += n

    def client_report(self, client: str | None, dropped: str | None) -> None:
        """Count what an ingest client says it dropped since its last report (`X-Observer-Dropped`): at most
        a thousand `reason=n` pairs of bounded values; a malformed pair is skipped."""
        if not dropped:
            return
        who = client if client in CLIENTS else "other"
        for pair in dropped.split(",")[:1000]:
            reason, _, count = pair.strip().partition("=")
            if not reason or not count.isdigit() or len(count) > 9:
                continue
            self.client_dropped[(who, reason if reason in CLIENT_DROP_REASONS else "other")] += int(count)

    def observe_request(self, version: str, *, code: int, added_s: float, ttft_s: float | None,
                        e2e_s: float | None) -> None:
        """Record one proxied request."""
        self.requests[(version, str(code))] += 1
        _hist(self.added, version, ADDED_LATENCY_BUCKETS).observe(added_s)
        if ttft_s is not None:
            _hist(self.ttft, version, TTFT_BUCKETS).observe(ttft_s)
        if e2e_s is not None:
            _hist(self.e2e, version, E2E_BUCKETS).observe(e2e_s)


def _hist(table: dict[str, Hist], key: str, edges: tuple[float, ...]) -> Hist:
    h = table.get(key)
    if h is None:
        h = table[key] = Hist(edges)
    return h


class SamplingCollector(Collector):
    """Exports SamplingMetrics plus gauges read through callbacks (queue depth, store size and rows)."""

    def __init__(self, metrics: SamplingMetrics, *, queue_depth: Callable[[], int] | None = None,
                 store_bytes: Callable[[], int | None] | None = None,
                 store_rows: Callable[[], Mapping[str, int] | None] | None = None,
                 redaction_kinds: Sequence[str] = ()) -> None:
        self.m = metrics
        self._queue_depth = queue_depth
        self._store_bytes = store_bytes
        self._store_rows = store_rows
        self._kinds = tuple(redaction_kinds)

    def collect(self) -> Iterator[Metric]:
        m = self.m
        yield _counter(names.SAMPLES_SEEN, "Requests or ingested samples seen.", [names.VERSION, names.SOURCE],
                       m.seen.items())
        yield _counter(names.SAMPLES_SAMPLED, "Requests selected by the sampling fraction (or ingested).",
                       [names.VERSION, names.SOURCE], m.sampled.items())
        yield _counter(names.SAMPLES_STORED, "Samples committed to the store.", [names.VERSION],
                       [((k,), v) for k, v in m.stored.items()])
        yield _counter(names.SAMPLES_DROPPED, "Selected samples not stored, by reason.",
                       [names.VERSION, names.REASON], m.dropped.items())
        yield _counter(names.INGEST_CLIENT_DROPPED, "Samples an ingest client (the LiteLLM callback) dropped before "
                       "they reached the observer, as it reported them, by reason.", [names.CLIENT, names.REASON],
                       m.client_dropped.items())
        yield _counter(names.CONVERSATION_KEYS, "Conversation keys the sources gave, by what became of them: kept "
                       "(as a keyed hash), no_secret (no conversation secret set), too_long.", [names.OUTCOME],
                       [((k,), m.conversation_keys.get(k, 0)) for k in CONVERSATION_OUTCOMES])
        yield _counter(names.FEEDBACK_EVENTS, "Users' feedback events joined to a sampled response and stored, by "
                       "the version that answered, kind (thumbs, rating, regenerate, abandon) and outcome.",
                       [names.VERSION, names.KIND, names.OUTCOME], m.feedback.items())
        yield _counter(names.FEEDBACK_REJECTED, "Feedback events not counted, by reason: invalid, unknown_response "
                       "(no sampled response with that id), duplicate, late, off_scale, flood, store_error.",
                       [names.REASON], [((r,), m.feedback_rejected.get(r, 0)) for r in FEEDBACK_REJECT_REASONS])
        redactions = {(k,): float(m.redactions.get(k, 0)) for k in self._kinds}
        redactions.update({(k,): float(v) for k, v in m.redactions.items()})
        yield _counter(names.REDACTIONS, "Matches replaced by a placeholder before storage, by kind.",
                       [names.REDACTION_KIND], redactions.items())
        # The codes the alerts and SLIs watch start at 0 once a version has traffic: rate() on a series born
        # with the first 503 has no value until its second scrape, so a shed burst would be seen a look late.
        requests: dict[tuple[str, str], float] = {k: float(v) for k, v in m.requests.items()}
        for version in {k[0] for k in m.requests}:
            for code in names.WATCHED_CODES:
                requests.setdefault((version, code), 0.0)
        yield _counter(names.PROXY_REQUESTS, "Requests forwarded by the sampling proxy, by status code.",
                       [names.VERSION, names.CODE], requests.items())
        uncapped = {(version,): float(self.m.uncapped.get(version, 0)) for version in {k[0] for k in m.requests}}
        yield _counter(names.PROXY_UNCAPPED, "Generation requests forwarded without max_tokens (or "
                       "max_completion_tokens): vLLM lets each run to max_model_len.", [names.VERSION],
                       uncapped.items())
        yield _counter(names.PROXY_SHADOW_REQUESTS, "Shadow-replay requests (X-Observer-Shadow) forwarded by the "
                       "proxy: never sampled, never in the request counts or latency histograms above.",
                       [names.VERSION, names.CODE], m.shadow.items())
        for name, doc, table in (
                (names.PROXY_ADDED_LATENCY, "Latency the proxy adds to a request (its own work, both ways).",
                 m.added),
                (names.PROXY_TTFT, "Client-side time to the first response body byte.", m.ttft),
                (names.PROXY_E2E, "Client-side end-to-end request latency.", m.e2e)):
            fam = HistogramMetricFamily(name, doc, labels=[names.VERSION])
            for version, h in sorted(table.items()):
                fam.add_metric([version], h.buckets(), h.total)
            yield fam
        if self._queue_depth is not None:
            g = GaugeMetricFamily(names.SAMPLE_QUEUE_DEPTH, "Samples waiting for storage.")
            g.add_metric([], float(self._queue_depth()))
            yield g
        if self._store_bytes is not None:
            size = self._store_bytes()
            if size is not None:
                g = GaugeMetricFamily(names.STORE_BYTES, "Bytes of the sample store on disk (with its WAL).")
                g.add_metric([], float(size))
                yield g
        if self._store_rows is not None:
            rows = self._store_rows()
            if rows is not None:
                g = GaugeMetricFamily(names.STORE_ROWS, "Samples in the store.", labels=[names.VERSION])
                for version, n in sorted(rows.items()):
                    g.add_metric([version], float(n))
                yield g


def _counter(name: str, doc: str, labels: list[str], values: Iterable[tuple[tuple[str, ...], float]]
             ) -> CounterMetricFamily:
    fam = CounterMetricFamily(name, doc, labels=labels)
    for key, value in sorted(values):
        fam.add_metric(list(key), float(value))
    return fam


def families(collector: Collector) -> Iterable[Metric]:
    """All families a collector yields (tests and the bench read them without a registry)."""
    return list(collector.collect())
