"""vLLM-format `/metrics` for a simulated engine: a prometheus_client Collector over engine snapshots.

prometheus_client formats exactly as vLLM does (vLLM uses it): sorted labels, `_created` series as
separate gauges, `vllm:` names kept in text format 0.0.4.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from observer_dev.sim import vllm_families as fam
from observer_dev.sim.engine import EngineSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ENGINE = "0"
WAITING_SPLIT = {"capacity": 1.0, "deferred": 0.0}
SLEEP_STATE = {"awake": 1.0, "weights_offloaded": 0.0, "discard_all": 0.0}
ASLEEP = {"awake": 0.0, "weights_offloaded": 1.0, "discard_all": 0.0}  # sleep level 1


class VllmCollector(Collector):
    """Builds vLLM's families from a fresh engine snapshot on every collect() (style rule 10)."""

    def __init__(self, snapshot: Callable[[], EngineSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot()
        base = [ENGINE, s.model]
        for f in fam.FAMILIES:
            name = fam.PREFIX + f.name
            labels = ["engine", "model_name"] if f.engine else ["model_name"]
            values = base if f.engine else [s.model]
            if f.type == "histogram":
                h = HistogramMetricFamily(name, f.help, labels=labels)
                cumulative, total = s.histograms[f.name]
                les = [repr(float(b)) for b in f.buckets] + ["+Inf"]  # as vLLM prints them
                h.add_metric(values, list(zip(les, cumulative, strict=True)), total)
                h.add_sample(name + "_created", dict(zip(labels, values, strict=True)), s.created)
                yield h
            elif f.type == "counter":
                c = CounterMetricFamily(name, f.help, labels=[*labels, f.label] if f.label else labels)
                if f.label:
                    for label_value in f.values:
                        c.add_metric([*values, label_value], s.labelled[f.name][label_value], created=s.created)
                else:
                    c.add_metric(values, s.counters[f.name], created=s.created)
                yield c
            else:
                g = GaugeMetricFamily(name, f.help, labels=[*labels, f.label] if f.label else labels)
                for extra, reading in _gauge_values(f, s):
                    g.add_metric([*values, *extra], reading)
                yield g
        if s.profile.spec_decode_acceptance is not None:  # vllm/v1/spec_decode/metrics.py, only when speculating
            for name, doc in (("spec_decode_num_draft_tokens", "Number of draft tokens."),
                              ("spec_decode_num_accepted_tokens", "Number of accepted tokens.")):
                c = CounterMetricFamily(fam.PREFIX + name, doc, labels=["engine", "model_name"])
                c.add_metric(base, s.counters[name], created=s.created)
                yield c
        if s.profile.corrupted_rate is not None:  # vllm/v1/metrics/loggers.py, with VLLM_COMPUTE_NANS_IN_LOGITS
            c = CounterMetricFamily(fam.PREFIX + "corrupted_requests", "Corrupted requests, in terms of total number "
                                    "of requests with NaNs in logits.", labels=["engine", "model_name"])
            c.add_metric(base, s.counters["corrupted_requests"], created=s.created)
            yield c
        if s.profile.engine_healthy is not None:  # vLLM main's fault-tolerance gauge: an `engine` label only
            health = GaugeMetricFamily(fam.PREFIX + "engine_healthy", fam.ENGINE_HEALTHY_HELP, labels=["engine"])
            health.add_metric([ENGINE], 1.0 if s.profile.engine_healthy else 0.0)
            yield health
        info = GaugeMetricFamily(fam.PREFIX + "cache_config_info", fam.CACHE_CONFIG_HELP,
                                 labels=[*fam.CACHE_CONFIG_INFO, "engine"])
        info.add_metric([*fam.CACHE_CONFIG_INFO.values(), ENGINE], 1.0)
        yield info
        http = CounterMetricFamily("http_requests", fam.HTTP_REQUESTS_HELP, labels=["handler", "method", "status"])
        for (handler, status), count in sorted(s.http.items()):
            http.add_metric([handler, "POST", status], count, created=s.created)
        yield http


def _gauge_values(f: fam.Family, s: EngineSnapshot) -> list[tuple[list[str], float]]:
    if f.name == "num_requests_waiting_by_reason":
        waiting = s.gauges["num_requests_waiting"]
        return [([reason], waiting * share) for reason, share in WAITING_SPLIT.items()]
    if f.name == "engine_sleep_state":
        states = ASLEEP if s.profile.asleep else SLEEP_STATE
        return [([state], value) for state, value in states.items()]
    return [([], s.gauges[f.name])]


def build_registry(snapshot: Callable[[], EngineSnapshot]) -> CollectorRegistry:
    """A registry holding only the vLLM families of one engine."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(VllmCollector(snapshot))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """The text exposition (format 0.0.4) of `registry`."""
    return generate_latest(registry)
