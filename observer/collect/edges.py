"""Latency SLO thresholds against the bucket edges the fleet actually exposes.

A latency SLO counts good requests with the bucket `le="<threshold>"`; PromQL matches `le` by text, so a
threshold that is not an edge of the *deployed* histogram selects nothing and the SLO never burns. The
config check knows vLLM's defaults and `bucket_edges`; these functions check against a live scrape
(`observer check-config --edges-from URL`, and `observer_slo_threshold_exposed` at run time) and name the
vLLM flag that adds a missing edge.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.collect.model import Histogram, VllmScrape
from observer.config.slo import SLOSpec
from observer.conventions import vllm


@dataclass(frozen=True)
class Threshold:
    """One latency threshold an SLO relies on."""

    slo: str
    family: vllm.LatencyId
    seconds: float
    versions: tuple[str, ...]  # empty: every version


def thresholds(slo: SLOSpec) -> list[Threshold]:
    """Every latency threshold of the config's SLOs (latency SLOs and the TTFT target of goodput SLOs)."""
    out = [Threshold(s.name, vllm.latency_id(s.histogram), s.threshold_seconds, tuple(s.versions))
           for s in slo.latency]
    out += [Threshold(g.name, "ttft", g.ttft_threshold_seconds, tuple(g.versions)) for g in slo.goodput]
    return out


def exposed_edges(scrape: VllmScrape) -> dict[vllm.LatencyId, tuple[float, ...]]:
    """The finite bucket edges of each latency family in one parsed vLLM scrape (union over models)."""
    out: dict[vllm.LatencyId, set[float]] = {}
    for model in scrape.models.values():
        for fam in vllm.LATENCY_IDS:
            h = model.histograms.get(vllm.FAMILY[fam])
            if h is not None:
                out.setdefault(fam, set()).update(h.bounds)
    return {k: tuple(sorted(v)) for k, v in out.items()}


def problems(ths: Sequence[Threshold], edges: Mapping[vllm.LatencyId, tuple[float, ...]], *, where: str
             ) -> list[str]:
    """What is wrong with the thresholds against `where`'s edges, each with the fix; [] when all match."""
    out = []
    for t in ths:
        got = edges.get(t.family)
        if got is None:
            out.append(f"{where}: no {vllm.FAMILY[t.family]} histogram, so SLO {t.slo!r} has no data there")
        elif not vllm.has_edge(got, t.seconds):
            out.append(f"{where}: SLO {t.slo!r} threshold {t.seconds:g}s is not a bucket edge of "
                       f"{vllm.FAMILY[t.family]} there (edges: {', '.join(f'{e:g}' for e in got)}); start vLLM "
                       f"(>= 0.32) with {vllm.custom_buckets_flag(t.family, t.seconds, got)} and set the SLO's "
                       f"bucket_edges to the same list, or pick an edge")
    return out


class ThresholdCollector(Collector):
    """`observer_slo_threshold_exposed{slo, version}`: 1 when the version's scraped histogram has the SLO's
    threshold edge, 0 when it does not (the SLO cannot burn there), absent before the first scrape."""

    def __init__(self, ths: Sequence[Threshold], histogram: Callable[[str, str], Histogram | None],
                 versions: Callable[[], Sequence[str]]) -> None:
        self.ths = list(ths)
        self.histogram = histogram
        self.versions = versions

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(names.SLO_THRESHOLD_EXPOSED, "1 when the version's scraped latency histogram has "
                              "the SLO threshold as a bucket edge, 0 when the SLO cannot count good requests.",
                              labels=[names.SLO, names.VERSION])
        for t in self.ths:
            for v in self.versions():
                if t.versions and v not in t.versions:
                    continue
                h = self.histogram(v, vllm.FAMILY[t.family])
                if h is not None:
                    g.add_metric([t.slo, v], 1.0 if vllm.has_edge(h.bounds, t.seconds) else 0.0)
        yield g
