"""The one table of latency families: for each id, vLLM's family, the observer's accumulated histogram and
its window summary. Every place that maps a latency id to a metric reads it here, so a fifth family (or
a renamed one) is one row, not four tables that must change together."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from observer.conventions import metrics as m
from observer.conventions.vllm import FAMILY, LATENCY_IDS, LatencyId, latency_id


@dataclass(frozen=True)
class LatencyFamily:
    """One latency family and the names it goes by."""

    id: LatencyId
    vllm: str  # the parsed vLLM family key (observer.collect.vllm: no `vllm:` prefix, no `_bucket`)
    exported: str  # the observer's accumulated histogram of it (fleet mode reads it from Prometheus)
    window: str  # the observer's window-quantile summary
    what: str  # in words, for help texts


LATENCY: Mapping[LatencyId, LatencyFamily] = MappingProxyType({
    "ttft": LatencyFamily("ttft", FAMILY["ttft"], m.HIST_TTFT, m.WIN_TTFT, "Time to first token"),
    "itl": LatencyFamily("itl", FAMILY["itl"], m.HIST_ITL, m.WIN_ITL, "Inter-token latency"),
    "e2e": LatencyFamily("e2e", FAMILY["e2e"], m.HIST_E2E, m.WIN_E2E, "End-to-end latency"),
    "queue": LatencyFamily("queue", FAMILY["queue"], m.HIST_QUEUE, m.WIN_QUEUE, "Queue time"),
    "router_ttft": LatencyFamily("router_ttft", FAMILY["router_ttft"], m.HIST_ROUTER_TTFT, m.WIN_ROUTER_TTFT,
                                 "Time to first token at the router (gateway queueing included)"),
})
assert tuple(LATENCY) == LATENCY_IDS


def latency_family(name: str) -> LatencyFamily:
    """The family named by its id or by a config alias (`inter_token`); KeyError naming the known ones."""
    return LATENCY[latency_id(name)]
