"""`/metrics` of a simulated router in front of the simulated engines: llm-d's endpoint picker (EPP) or NVIDIA
Dynamo's frontend, with the family names, labels and buckets their code registers (observer.conventions.routers
says where). Stand-in for the real routers, which need Kubernetes (the EPP) or GPUs and NATS (Dynamo) to run.

Per routed version: TTFT as the router measures it (the engine's TTFT plus the profile's `router_queue_s` spent at
the gateway), requests and errors, requests held. llm-d also reports the pool: its flow-control saturation (the
highest `router_saturation` of the versions it routes) and stale endpoints. During llm-d's rename the EPP writes the
deprecated twins (`inference_objective_*`, `inference_extension_*`) beside `llm_d_epp_*` with the same values; so
does this stand-in, so the observer's count-once rule is exercised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from observer.conventions import routers as r
from observer.conventions.vllm import ROUTER_TTFT_EDGES
from observer_dev.sim.engine import EngineSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
POOL = "sim-pool"
DYNAMO_TTFT_EDGES = (0.0, 0.0022, 0.0047, 0.01, 0.022, 0.047, 0.1, 0.22, 0.47, 1.0, 2.2, 4.7, 10.0, 22.0, 48.0, 100.0,
                     220.0, 480.0)
"""Dynamo's default TTFT buckets: generate_log_buckets(0.001, 480, 18), rounded to 2 significant figures."""


@dataclass(frozen=True)
class Routed:
    """One version behind the router: the model name it routes it under, and its replicas' engine snapshots."""

    model: str
    snapshots: Callable[[], Sequence[EngineSnapshot]]


def _ttft(snaps: Sequence[EngineSnapshot]) -> tuple[list[float], float]:
    counts = [0.0] * (len(ROUTER_TTFT_EDGES) + 1)
    total = 0.0
    for s in snaps:
        cumulative, ssum = s.router[0], s.router[1]
        for i, c in enumerate(cumulative):
            counts[i] += c
        total += ssum
    return counts, total


class RouterCollector(Collector):
    """Builds the router's families from the routed versions' engines on every collect()."""

    def __init__(self, kind: r.RouterKind, routed: Sequence[Routed]) -> None:
        self.kind = kind
        self.routed = routed

    def collect(self) -> Iterator[Metric]:
        views = [(v.model, v.snapshots()) for v in self.routed]
        yield from (self._llmd(views) if self.kind is r.RouterKind.LLMD_EPP else self._dynamo(views))

    def _llmd(self, views: list[tuple[str, Sequence[EngineSnapshot]]]) -> Iterator[Metric]:
        labels = ["model_name", "target_model_name", "fairness_id", "priority"]
        ttft = HistogramMetricFamily(r.LLMD_TTFT, "[ALPHA] Time to first token in seconds, measured from request "
                                                  "received to first response byte.", labels=[*labels, "streaming"])
        edges = [*(repr(float(b)) for b in ROUTER_TTFT_EDGES), "+Inf"]
        for model, snaps in views:
            counts, total = _ttft(snaps)
            ttft.add_metric([model, model, "default", "0", "true"], list(zip(edges, counts, strict=True)), total)
        yield ttft
        for names, errors, doc in ((r.LLMD_REQUESTS, False, "requests"), (r.LLMD_ERRORS, True, "request errors")):
            for family in names:  # today's name and its deprecated twin, same values
                deprecated = "[Deprecated] " if family != names[0] else ""
                c = CounterMetricFamily(family.removesuffix("_total"), f"[ALPHA] {deprecated}Total number of {doc}.",
                                        labels=[*labels, *(["error_code"] if errors else [])])
                for model, snaps in views:
                    value = sum(s.router[3] if errors else s.router[2] for s in snaps)
                    c.add_metric([model, model, "default", "0", *(["500"] if errors else [])], value)
                yield c
        queue = GaugeMetricFamily(r.LLMD_QUEUE[0], "[ALPHA] Requests held by flow control.",
                                  labels=["fairness_id", "priority", "inference_pool", *labels[:2]])
        for model, snaps in views:  # held at the gateway: the arrivals of `router_queue_s` (Little's law)
            held = sum(s.profile.router_queue_s * s.profile.load_rps for s in snaps)
            queue.add_metric(["default", "0", POOL, model, model], float(round(held)))
        yield queue
        saturation = max((s.profile.router_saturation for _, snaps in views for s in snaps), default=0.0)
        stale = sum(s.profile.router_stale_endpoints for _, snaps in views for s in snaps)
        for family in r.LLMD_SATURATION:
            g = GaugeMetricFamily(family, "[ALPHA] Pool saturation signal gating Flow Control dispatch.",
                                  labels=["inference_pool", "stage"])
            for stage in ("prefill", "decode", "effective"):
                g.add_metric([POOL, stage], saturation)
            yield g
        g = GaugeMetricFamily(r.LLMD_STALE[0], "[ALPHA] Candidate endpoints whose metrics are missing or stale.",
                              labels=["detector"])
        g.add_metric(["utilization"], float(stale))
        yield g

    def _dynamo(self, views: list[tuple[str, Sequence[EngineSnapshot]]]) -> Iterator[Metric]:
        ttft = HistogramMetricFamily(r.DYNAMO_TTFT, "Time to first token in seconds", labels=["model"])
        for model, snaps in views:
            counts, total = _ttft(snaps)
            # Re-bucket onto Dynamo's edges from the router edges' cumulative counts (≤ the nearest lower edge).
            cum = [0.0] * len(DYNAMO_TTFT_EDGES)
            for j, edge in enumerate(DYNAMO_TTFT_EDGES):
                below = [i for i, b in enumerate(ROUTER_TTFT_EDGES) if b <= edge]
                cum[j] = counts[below[-1]] if below else 0.0
            buckets = [(repr(float(e)), c) for e, c in zip(DYNAMO_TTFT_EDGES, cum, strict=True)]
            ttft.add_metric([model], [*buckets, ("+Inf", counts[-1])], total)
        yield ttft
        requests = CounterMetricFamily(r.DYNAMO_REQUESTS.removesuffix("_total"), "Total number of LLM requests "
                                       "processed", labels=["model", "endpoint", "request_type", "status"])
        for model, snaps in views:
            errors = sum(float(s.router[3]) for s in snaps)
            total = sum(float(s.router[2]) for s in snaps)
            requests.add_metric([model, "chat_completions", "stream", "success"], total - errors)
            requests.add_metric([model, "chat_completions", "stream", "error"], errors)
        yield requests
        queued = GaugeMetricFamily(r.DYNAMO_QUEUED, "Number of requests in HTTP processing queue", labels=["model"])
        for model, snaps in views:
            queued.add_metric([model], float(round(sum(s.profile.router_queue_s * s.profile.load_rps for s in snaps))))
        yield queued


def render(kind: r.RouterKind, routed: Sequence[Routed]) -> bytes:
    """The router's /metrics body now."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RouterCollector(kind, routed))
    return generate_latest(registry)
