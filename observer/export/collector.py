"""Prometheus export of the scraping area: per-version signals, running totals and self-metrics.

A custom Collector builds every family from the store's immutable snapshot on each scrape of the
observer (style rule 10): no module-level metric objects, each test uses a fresh registry. Values
that are unknown (None) or not finite are left out — a missing series, never NaN. Every label value
is bounded: configured version and target names, the version's model, enum tokens, bucket edges.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Iterator, Sequence

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from observer import __version__
from observer import conventions as names
from observer.analyse.signals import Quantiles, SignalStore, VersionExport
from observer.analyse.signals.model import OTHER_REASON
from observer.collect.scraper import TargetHealth
from observer.conventions import routers, vllm
from observer.conventions.latency import LATENCY

_VM = [names.VERSION, names.MODEL]
_TARGET = [names.VERSION, names.KIND, names.TARGET]

_HISTOGRAMS: tuple[tuple[str, str, str], ...] = (
    (names.HIST_TTFT, vllm.TTFT, "Time to first token, accumulated over the version's replicas."),
    (names.HIST_ITL, vllm.ITL, "Time between output tokens (one sample per decode step), accumulated."),
    (names.HIST_E2E, vllm.E2E, "End-to-end request latency, accumulated over the version's replicas."),
    (names.HIST_QUEUE, vllm.QUEUE, "Time requests waited in vLLM's queue, accumulated."),
    (names.HIST_TPOT, vllm.TPOT, "Time per output token of each request (vLLM ≥ 0.11), accumulated."),
    (names.HIST_PREFILL, vllm.PREFILL, "Time requests spent in prefill, accumulated."),
    (names.HIST_DECODE, vllm.DECODE, "Time requests spent in decode, accumulated."),
    (names.HIST_PROMPT_LENGTH, vllm.PROMPT_LENGTH, "Prompt length of finished requests in tokens."),
    (names.HIST_GENERATION_LENGTH, vllm.GENERATION_LENGTH, "Generated tokens per finished request."),
    (names.HIST_MAX_GENERATION_TOKENS, vllm.MAX_GENERATION_TOKENS,
     "Requested max generation tokens per request."),
    (names.HIST_ROUTER_TTFT, routers.TTFT, "Time to first token the router in front of the version measured "
                                          "(llm-d EPP, Dynamo frontend): gateway queueing included."),
)
_COUNTERS: tuple[tuple[str, str, str], ...] = (
    (names.PROMPT_TOKENS, vllm.PROMPT_TOKENS, "Prompt tokens processed, accumulated over replicas."),
    (names.GENERATION_TOKENS, vllm.GENERATION_TOKENS, "Tokens generated, accumulated over replicas."),
    (names.PREEMPTIONS, vllm.PREEMPTIONS, "Requests preempted by the scheduler, accumulated."),
    (names.PREFIX_CACHE_QUERIES, vllm.PREFIX_QUERIES, "Prefix-cache queries in tokens, accumulated."),
    (names.PREFIX_CACHE_HITS, vllm.PREFIX_HITS, "Prefix-cache hits in tokens, accumulated."),
    (names.CORRUPTED_REQUESTS, vllm.CORRUPTED_REQUESTS, "Finished requests whose logits held not-a-number "
     "values (vLLM with VLLM_COMPUTE_NANS_IN_LOGITS=1), accumulated; absent where vLLM does not check."),
)
_WINDOW_QUANTILES: tuple[tuple[str, str, str], ...] = tuple(
    (f.window, f.id, f"{f.what} over the window, by quantile.") for f in LATENCY.values())
_FAMILY_OF = {f.window: f.vllm for f in LATENCY.values()}
"""Window summary name → the vLLM histogram family behind it."""


HTTP_CLASSES = frozenset({"2xx", "3xx", "4xx", "5xx"})


def _ok(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def _gauge(name: str, doc: str, labels: Sequence[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=list(labels))


class ScrapeCollector(Collector):
    """Builds the signal, running-total and self-metric families from one snapshot per collect()."""

    def __init__(self, store: SignalStore, health: TargetHealth) -> None:
        self.store = store
        self.health = health

    def describe(self) -> list[Metric]:
        """Nothing up front: the families depend on what has been scraped."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Yield every family, built from the latest snapshot."""
        snap = self.store.snapshot
        exports = [e for e in snap.versions.values() if e.signals.model is not None or e.totals is not None]
        everything = list(snap.versions.values())
        yield from self._totals(exports)
        yield from self._window(exports)
        yield from self._replicas(everything)
        yield from self._gpus(everything)
        yield from self._cost(everything)
        yield from self._self_metrics(snap.cycles)

    @staticmethod
    def _labels(e: VersionExport) -> list[str]:
        return [e.signals.version, e.signals.model or ""]

    def _by_label(self, exports: Sequence[VersionExport], name: str, doc: str, family: str, label: str
                  ) -> CounterMetricFamily:
        """A labelled running total of every version (label values as the parser bounded them)."""
        out = CounterMetricFamily(name, doc, labels=[*_VM, label])
        for e in exports:
            values = None if e.totals is None else e.totals.labelled(family)
            for value, n in sorted((values or {}).items()):
                out.add_metric([*self._labels(e), value], n)
        return out

    def _totals(self, exports: Sequence[VersionExport]) -> Iterator[Metric]:
        for name, fam, doc in _HISTOGRAMS:
            h_family = HistogramMetricFamily(name, doc, labels=_VM)
            for e in exports:
                h = None if e.totals is None else e.totals.histogram(fam)
                if h is None:
                    continue
                buckets = [(le, c) for le, c in zip(h.le_labels, h.cumulative, strict=False)]
                buckets.append(("+Inf", h.cumulative[-1]))
                h_family.add_metric(self._labels(e), buckets, h.sum)
            yield h_family
        requests = CounterMetricFamily(names.REQUESTS, "Finished requests by finished_reason, accumulated.",
                                       labels=[*_VM, names.FINISHED_REASON])
        for e in exports:
            by_reason = None if e.totals is None else e.totals.labelled(vllm.REQUEST_SUCCESS)
            if by_reason is None:
                continue
            folded = dict.fromkeys(names.FINISHED_REASONS, 0.0)
            for reason, n in by_reason.items():
                key = reason if reason in names.FINISHED_REASONS else OTHER_REASON
                folded[key] = folded.get(key, 0.0) + n
            for reason, n in folded.items():
                requests.add_metric([*self._labels(e), reason], n)
        yield requests
        yield self._by_label(exports, names.ADMISSION_REJECTIONS, "Requests vLLM refused at admission (a queue "
                             "limit; answered 503 before the engine), by reason, accumulated.",
                             vllm.ADMISSION_REJECTIONS, names.REASON)
        yield self._by_label(exports, names.SPEC_DECODE_TOKENS, "Speculative-decoding draft tokens by outcome "
                             "(accepted, rejected), accumulated; present only where vLLM speculates.",
                             vllm.SPEC_DECODE, names.OUTCOME)
        yield self._by_label(exports, names.ROUTER_REQUESTS, "Requests the router in front of the version routed to "
                             "it, by outcome (ok, error), accumulated.", routers.REQUESTS, names.OUTCOME)
        saturated = _gauge(names.ROUTER_SATURATED, "1 while the router's pool is saturated or has endpoints with "
                           "stale metrics (llm-d flow control): the canary comparison is unfair then.", [names.VERSION])
        queued = _gauge(names.ROUTER_QUEUED, "Requests of the version held at the router now (llm-d flow control "
                        "queue, Dynamo's HTTP queue).", [names.VERSION])
        for e in exports:
            if e.signals.router_trouble_at is not None or e.signals.router_ttft is not None \
                    or e.signals.router_queued is not None:
                saturated.add_metric([e.signals.version], float(e.signals.router_saturated))
            if e.signals.router_queued is not None:
                queued.add_metric([e.signals.version], e.signals.router_queued)
        yield from (saturated, queued)
        http = CounterMetricFamily(names.HTTP_RESPONSES, "Responses of vLLM's generation handlers by status class "
                                   "(its HTTP instrumentator), accumulated; single-model targets only.",
                                   labels=[*_VM, names.HTTP_STATUS_CLASS])
        for e in exports:
            by_status = None if e.totals is None else e.totals.labelled(vllm.HTTP_STATUS)
            classes: dict[str, float] = {}
            for status, n in (by_status or {}).items():
                key = status if status in HTTP_CLASSES else "other"
                classes[key] = classes.get(key, 0.0) + n
            for status, n in sorted(classes.items()):
                http.add_metric([*self._labels(e), status], n)
        yield http
        for name, fam, doc in _COUNTERS:
            c_family = CounterMetricFamily(name, doc, labels=_VM)
            for e in exports:
                value = None if e.totals is None else e.totals.counter(fam)
                if _ok(value):
                    assert value is not None
                    c_family.add_metric(self._labels(e), value)
            yield c_family
        computed = CounterMetricFamily(names.PROMPT_TOKENS_COMPUTED, "Prompt tokens the engines prefilled (vLLM's "
                                       "prompt_tokens_by_source, local_compute: no prefix-cache hits, no KV "
                                       "transfers); absent unless every replica reports it.", labels=_VM)
        for e in exports:
            if _ok(e.prompt_tokens_computed):
                assert e.prompt_tokens_computed is not None
                computed.add_metric(self._labels(e), e.prompt_tokens_computed)
        yield computed

    def _window(self, exports: Sequence[VersionExport]) -> Iterator[Metric]:
        # A summary: quantiles over the sliding window, _count/_sum the running totals (as client
        # libraries' summaries do), so promtool accepts the `quantile` label and rate() works on _count.
        for name, attr, doc in _WINDOW_QUANTILES:
            q_family = SummaryMetricFamily(name, doc, labels=_VM)
            fam = _FAMILY_OF[name]
            for e in exports:
                q: Quantiles | None = getattr(e.signals, attr)
                total = None if e.totals is None else e.totals.histogram(fam)
                if total is None:
                    continue
                labels = dict(zip(_VM, self._labels(e), strict=True))
                for label, value in (("0.5", None if q is None else q.p50), ("0.95", None if q is None else q.p95),
                                     ("0.99", None if q is None else q.p99)):
                    if value is not None and math.isfinite(value):
                        q_family.samples.append(Sample(name, {**labels, names.QUANTILE: label}, value))
                q_family.samples.append(Sample(name + "_count", labels, total.count))
                q_family.samples.append(Sample(name + "_sum", labels, total.sum))
            yield q_family
        scalars: tuple[tuple[str, str, str], ...] = (
            (names.WIN_REQUEST_RATE, "request_rate", "Finished requests per second over the window."),
            (names.WIN_PROMPT_TOKEN_RATE, "prompt_token_rate", "Prompt tokens per second over the window."),
            (names.WIN_GENERATION_TOKEN_RATE, "generation_token_rate", "Generated tokens per second (window)."),
            (names.WIN_PREEMPTION_RATE, "preemption_rate", "Preemptions per second over the window."),
            (names.WIN_PREFIX_CACHE_HIT_RATIO, "prefix_cache_hit_ratio", "Prefix-cache hit ratio (tokens, window)."),
            (names.QUEUE_DEPTH_PER_REPLICA, "queue_depth_per_replica", "Waiting requests per replica (window mean)."),
            (names.RUNNING_REQUESTS, "running_requests", "Running requests over all replicas (window mean)."),
        )
        for name, attr, doc in scalars:
            s_family = _gauge(name, doc, _VM)
            for e in exports:
                value = getattr(e.signals, attr)
                if _ok(value):
                    s_family.add_metric(self._labels(e), value)
            yield s_family
        ratio = _gauge(names.WIN_FINISHED_RATIO, "Share of finished requests by reason over the window.",
                       [*_VM, names.FINISHED_REASON])
        kv = _gauge(names.KV_CACHE_USAGE, "KV-cache usage 0-1 over the window (mean or max over replicas).",
                    [*_VM, names.STAT])
        for e in exports:
            for reason, value in sorted(e.signals.finished_ratio.items()):
                if _ok(value):
                    ratio.add_metric([*self._labels(e), reason], value)
            for stat, value in (("mean", e.signals.kv_cache_mean), ("max", e.signals.kv_cache_max)):
                if _ok(value):
                    assert value is not None
                    kv.add_metric([*self._labels(e), stat], value)
        yield from (ratio, kv)

    def _replicas(self, exports: Sequence[VersionExport]) -> Iterator[Metric]:
        # Every version, also one that never answered (model label empty until a model is seen): 0 is news.
        replicas = _gauge(names.REPLICAS, "vLLM targets of the version that answered the last scrape.", _VM)
        rv = [names.VERSION, names.REPLICA]
        p50 = _gauge(names.REPLICA_TTFT_P50, "Window TTFT median of one replica (its own histogram); the "
                     "outlier test compares it with the siblings'.", rv)
        p95 = _gauge(names.REPLICA_TTFT_P95, "Window TTFT p95 of one replica (its own histogram).", rv)
        e2e = _gauge(names.REPLICA_E2E_P95, "Window end-to-end latency p95 of one replica (its own histogram).", rv)
        share = _gauge(names.REPLICA_SHARE, "Share of the version's window requests one replica served.", rv)
        score = _gauge(names.REPLICA_OUTLIER_SCORE, "Robust z-score of a replica's median TTFT against its "
                       "siblings' (median, MAD); only with enough replicas and requests.", rv)
        outlier = _gauge(names.REPLICA_OUTLIER, "1 when a replica is much slower than its siblings (z-score, "
                         "ratio to the median and request floors of analyse.replicas).", rv)
        states = _gauge(names.REPLICAS_IN_STATE, "Replicas of the version that answered the last scrape and are "
                        "unhealthy (vLLM engine_healthy 0), asleep (sleep mode: idle on purpose) or hung (requests "
                        "running, none finished for scrape.hung_after_seconds).", [names.VERSION, names.STATE])
        for e in exports:
            replicas.add_metric(self._labels(e), e.signals.replicas_up)
            sig = e.signals
            for state in names.ENGINE_STATES:  # every state, 0 included: a series that is there says "none"
                states.add_metric([sig.version, state], float(sig.in_state(state)))
            for r in e.replicas:
                labels = [e.signals.version, r.replica]
                if r.ttft_p50 is not None:
                    p50.add_metric(labels, r.ttft_p50)
                if r.ttft_p95 is not None:
                    p95.add_metric(labels, r.ttft_p95)
                if r.e2e_p95 is not None:
                    e2e.add_metric(labels, r.e2e_p95)
                if r.share is not None:
                    share.add_metric(labels, r.share)
                if r.score is not None:
                    score.add_metric(labels, r.score)
                    outlier.add_metric(labels, float(r.outlier))
        cold = HistogramMetricFamily(names.COLD_START, "Seconds from a pod's start (Kubernetes status.startTime) "
                                     "to the observer's first good scrape of it, for pods that started while "
                                     "the observer watched.", labels=[names.VERSION])
        for e in exports:
            c = e.cold_starts
            if c is not None:
                cold.add_metric([e.signals.version], c.buckets(), c.total)
        yield from (replicas, states, p50, p95, e2e, share, score, outlier, cold)

    def _gpus(self, exports: Sequence[VersionExport]) -> Iterator[Metric]:
        stat = [names.VERSION, names.STAT]
        util = _gauge(names.GPU_UTIL, "GPU utilisation 0-1 of the version's GPUs.", stat)
        fb = _gauge(names.GPU_FB_USED, "Framebuffer used / (used + free + reserved) of the version's GPUs.", stat)
        temp = _gauge(names.GPU_TEMP, "GPU temperature of the version's GPUs.", stat)
        power = _gauge(names.GPU_POWER, "Power draw per GPU of the version.", stat)
        tensor = _gauge(names.GPU_TENSOR_ACTIVE, "Tensor pipe active ratio of the version's GPUs.", stat)
        dram = _gauge(names.GPU_DRAM_ACTIVE, "DRAM active ratio of the version's GPUs.", stat)
        count = _gauge(names.GPU_COUNT, "GPUs joined to the version from DCGM.", [names.VERSION])
        xid = CounterMetricFamily(names.GPU_XID_ERRORS, "XID errors seen on the version's GPUs (changes of the "
                                                        "last-XID code to a new non-zero value).",
                                  labels=[names.VERSION])
        mem = _gauge(names.GPU_MEMORY_ERRORS, "DCGM ECC and row-remap counters summed over the version's GPUs, "
                     "by kind (dbe_volatile: uncorrectable since the driver loaded; remap_failures: GPUs whose "
                     "row remapping failed).", [names.VERSION, names.KIND])
        throttle = CounterMetricFamily(names.GPU_THROTTLE_SECONDS, "Time the version's GPUs were throttled by the "
                                       "power cap or temperature (DCGM violation counters, summed, seconds).",
                                       labels=[names.VERSION, names.REASON])
        clocks = _gauge(names.GPU_CLOCK_THROTTLED, "GPUs of the version whose clocks are slowed now, by NVML reason "
                        "(DCGM clock throttle reasons; hw_*: the hardware slows itself down).",
                        [names.VERSION, names.REASON])
        restarts = CounterMetricFamily(names.ENGINE_RESTARTS, "Restarts of the version's vLLM servers seen as "
                                       "counter resets between scrapes (absorbed in every running total).",
                                       labels=[names.VERSION])
        for e in exports:
            v, g = e.signals.version, e.signals.gpu
            restarts.add_metric([v], e.engine_restarts)
            if e.signals.gpu is not None or e.xid_errors_seen:
                xid.add_metric([v], e.xid_errors_seen)
            if g is None:
                continue
            count.add_metric([v], g.gpus)
            for kind, x in sorted(g.memory_errors.items()):
                mem.add_metric([v, kind], x)
            for reason, x in sorted(g.throttle_seconds.items()):
                throttle.add_metric([v, reason], x)
            for reason, n in sorted(g.clock_throttled.items()):
                clocks.add_metric([v, reason], float(n))
            pairs = ((util, g.utilization_mean, g.utilization_max),
                     (fb, g.framebuffer_used_mean, g.framebuffer_used_max),
                     (temp, g.temperature_celsius_mean, g.temperature_celsius_max),
                     (power, g.power_watts_mean, g.power_watts_max), (tensor, g.tensor_active_mean, None),
                     (dram, g.dram_active_mean, None))
            for family, mean, high in pairs:
                for label, value in (("mean", mean), ("max", high)):
                    if _ok(value):
                        assert value is not None
                        family.add_metric([v, label], value)
        yield from (util, fb, temp, power, tensor, dram, count, xid, mem, throttle, clocks, restarts)

    def _cost(self, exports: Sequence[VersionExport]) -> Iterator[Metric]:
        meter = self.store.cost
        if meter is None:
            return
        priced = meter.spec.priced
        v_only = [names.VERSION]
        by_model = [names.VERSION, names.GPU_MODEL]
        cost = CounterMetricFamily(names.COST, "Cost of the version's GPUs (or replicas) held, busy or idle, in "
                                   "the currency of cost.gpu_hour_prices.", labels=v_only)
        replica = CounterMetricFamily(names.REPLICA_SECONDS, "Replicas up × seconds.", labels=v_only)
        gpu = CounterMetricFamily(names.GPU_SECONDS, "GPUs attributed to the version × seconds (DCGM, or "
                                  "cost.gpus_per_replica without it).", labels=by_model)
        unpriced = CounterMetricFamily(names.UNPRICED_GPU_SECONDS, "GPU-seconds of models with no price in "
                                       "cost.gpu_hour_prices (the cost ratios are absent while they grow).",
                                       labels=by_model)
        energy = CounterMetricFamily(names.ENERGY, "Energy of the version's GPUs (DCGM total energy, or power × "
                                     "time).", labels=v_only)
        per_mtok = _gauge(names.COST_PER_MILLION_TOKENS, "Cost over the cost window per million tokens of a "
                          "kind (the whole cost over those tokens).", [names.VERSION, names.KIND])
        per_kreq = _gauge(names.COST_PER_THOUSAND_REQUESTS, "Cost over the cost window per thousand finished "
                          "requests.", v_only)
        joules = _gauge(names.ENERGY_PER_TOKEN, "GPU energy over the cost window per token of a kind.",
                        [names.VERSION, names.KIND])
        for e in exports:
            t, w, v = e.cost, e.cost_window, e.signals.version
            if t is None:
                continue
            replica.add_metric([v], t.replica_seconds)
            unpriced_by_model = dict(t.unpriced_gpu_seconds)
            for model, seconds in t.gpu_seconds:  # 0 unpriced for a priced model: the series exists
                gpu.add_metric([v, model], seconds)
                unpriced.add_metric([v, model], unpriced_by_model.get(model, 0.0))
            if priced:
                cost.add_metric([v], t.cost)
            if t.energy_joules is not None:
                energy.add_metric([v], t.energy_joules)
            if w is None:
                continue
            if priced and w.unpriced_gpu_seconds == 0:
                for kind in names.TOKEN_KINDS:
                    value = w.per_million_tokens(kind)
                    if _ok(value):
                        assert value is not None
                        per_mtok.add_metric([v, kind], value)
                value = w.per_thousand_requests()
                if _ok(value):
                    assert value is not None
                    per_kreq.add_metric([v], value)
            for kind in (names.TokenKind.GENERATION, names.TokenKind.TOTAL, names.TokenKind.COMPUTED):
                value = w.joules_per_token(kind)
                if _ok(value):
                    assert value is not None
                    joules.add_metric([v, kind], value)
        yield from (cost, replica, gpu, unpriced, energy, per_mtok, per_kreq, joules)

    def _self_metrics(self, cycles: int) -> Iterator[Metric]:
        up = _gauge(names.TARGET_UP, "1 when the target answered the last scrape with a valid exposition.", _TARGET)
        duration = _gauge(names.SCRAPE_DURATION, "Duration of the last scrape of the target.", _TARGET)
        last = _gauge(names.LAST_SUCCESS, "Unix time of the last successful scrape of the target.", _TARGET)
        errors = CounterMetricFamily(names.SCRAPE_ERRORS, "Failed scrapes by bounded reason.",
                                     labels=[*_TARGET, names.REASON])
        for s in self.health.statuses():
            labels = [s.version, s.kind.value, s.url]
            if s.up is not None:
                up.add_metric(labels, 1.0 if s.up else 0.0)
            if _ok(s.last_duration_seconds):
                assert s.last_duration_seconds is not None
                duration.add_metric(labels, s.last_duration_seconds)
            if s.last_success is not None:
                last.add_metric(labels, s.last_success)
            for reason, n in s.errors:
                errors.add_metric([*labels, reason.value], n)
        cyc = CounterMetricFamily(names.SCRAPE_CYCLES, "Scrape cycles completed.", value=cycles)
        build = _gauge(names.BUILD_INFO, "Build information of this observer (value 1).",
                       [names.OBSERVER_VERSION, names.PYTHON_VERSION])
        build.add_metric([__version__, platform.python_version()], 1.0)
        yield from (up, duration, last, errors, cyc, build)
