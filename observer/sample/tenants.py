"""Tenants as a bounded dimension: which tenant a request served, from a trusted source only, as a label of at
most `len(allow) + top_n` values plus `other`.

Trust: a tenant header counts only from a peer the config names (`sampling.tenants.trusted_peers`, the
authenticating gateway that sets it); the same header from anyone else is ignored and counted (`untrusted`) —
a client that sets its own tenant must not choose its series. Mirror ingest (behind the API token) and the
LiteLLM callback (the key's team, inside LiteLLM) are trusted sources.

Bound: the allow-listed tenants are labelled from the start; others are counted in a fixed-size heavy-hitter
sketch (Space-Saving) and labelled once their estimated count reaches `min_requests`, until `top_n` of them
are; a label once given stays for the process's life (a series that comes and goes is worse than one that
stays), so the label set never passes the cap. Everything else is `other`, counted by reason.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.analyse.histogram import Hist
from observer.config.sampling import TenantSpec
from observer.conventions import vllm
from observer.sample.metrics import _counter  # the sampling collector's counter builder

OTHER = "other"
"""The label of every tenant past the cap (and of requests that named none)."""
NONE = "none"
"""The label of requests no trusted source named a tenant for."""
OVERFLOW_REASONS = ("other", "untrusted", "too_long")
"""Why a request's tenant was not its label: past the cap, a header from an untrusted peer, a key too long."""
SKETCH_FACTOR = 10
"""Space-Saving counters per dynamic label slot: the sketch's error on a count is at most n / counters."""


@dataclass
class SpaceSaving:
    """The Space-Saving heavy-hitter sketch (Metwally et al. 2005) with `size` counters: every key whose true
    count exceeds n/size is in it. A key that takes an evicted key's counter inherits its count as its error,
    so count − error is a count the key surely has: a flood of one-off keys never reaches a label with it."""

    size: int
    counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # key → (count, inherited error)

    def add(self, key: str) -> int:
        """Count one `key`; the count it surely has (its estimate less the inherited error)."""
        count, error = self.counts.get(key, (0, 0))
        if not count and len(self.counts) >= self.size:  # evict the smallest; the newcomer inherits its count
            smallest = min(self.counts, key=lambda k: self.counts[k][0])
            count = error = self.counts.pop(smallest)[0]
        self.counts[key] = (count + 1, error)
        return count + 1 - error


class TenantLabels:
    """key → bounded label, and the overflow counts."""

    def __init__(self, spec: TenantSpec) -> None:
        self.spec = spec
        self.allowed = frozenset(spec.allow)
        self.dynamic: set[str] = set()
        self.sketch = SpaceSaving(max(1, spec.top_n) * SKETCH_FACTOR)
        self.overflow: Counter[str] = Counter()
        self._peers = [ipaddress.ip_network(p, strict=False) for p in spec.trusted_peers]

    def trusted(self, peer: str | None) -> bool:
        """Whether a header from `peer` (an IP address) names the tenant."""
        if not peer:
            return False
        try:
            ip = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(ip in net for net in self._peers)

    def from_header(self, value: str, peer: str | None) -> str:
        """The label of a request whose tenant header says `value`, sent by `peer`."""
        if not self.trusted(peer):
            self.overflow["untrusted"] += 1
            return NONE
        return self.label(value)

    def label(self, key: str | None) -> str:
        """The label of a trusted source's tenant `key` (None or empty: `none`)."""
        if not key:
            return NONE
        if len(key) > self.spec.max_key_chars:
            self.overflow["too_long"] += 1
            return OTHER
        if key in self.allowed or key in self.dynamic:
            return key
        if key in (OTHER, NONE):  # the reserved labels cannot be claimed
            self.overflow["other"] += 1
            return OTHER
        if self.sketch.add(key) >= self.spec.min_requests and len(self.dynamic) < self.spec.top_n:
            self.dynamic.add(key)
            return key
        self.overflow["other"] += 1
        return OTHER

    def labels(self) -> list[str]:
        """Every label given so far (bounded: allow + top_n + other + none)."""
        return sorted(self.allowed | self.dynamic | {OTHER, NONE})


@dataclass
class TenantMetrics:
    """Per (version, tenant label): requests by status class, errors, tokens, TTFT."""

    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (version, tenant, code class)
    tokens: Counter[tuple[str, str, str]] = field(default_factory=Counter)  # (version, tenant, prompt|generation)
    ttft: dict[tuple[str, str], Hist] = field(default_factory=dict)

    def observe(self, version: str, tenant: str, *, code: int, ttft_s: float | None,
                prompt_tokens: int | None = None, output_tokens: int | None = None) -> None:
        self.requests[(version, tenant, f"{code // 100}xx")] += 1
        if ttft_s is not None:
            h = self.ttft.get((version, tenant))
            if h is None:
                h = self.ttft[(version, tenant)] = Hist(vllm.TTFT_EDGES)
            h.observe(ttft_s)
        if prompt_tokens:
            self.tokens[(version, tenant, "prompt")] += prompt_tokens
        if output_tokens:
            self.tokens[(version, tenant, "generation")] += output_tokens


class Tenants:
    """One process's tenant labels and counters, shared by its proxies and its ingest."""

    def __init__(self, spec: TenantSpec) -> None:
        self.labels = TenantLabels(spec)
        self.metrics = TenantMetrics()
        self.header = spec.header.lower().encode("latin-1") if spec.header else None

    def collector(self) -> TenantCollector:
        return TenantCollector(self.labels, self.metrics)


class TenantCollector(Collector):
    """Exports the per-tenant counters and the overflow counts."""

    def __init__(self, labels: TenantLabels, metrics: TenantMetrics) -> None:
        self.labels = labels
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        yield _counter(names.TENANT_REQUESTS, "Requests per tenant (a bounded label: allow-listed, the busiest up "
                       "to top_n, else other; none where no trusted source named one), by status class.",
                       [names.VERSION, names.TENANT, names.CODE], m.requests.items())
        yield _counter(names.TENANT_TOKENS, "Prompt and generated tokens per tenant (from samples that carry them).",
                       [names.VERSION, names.TENANT, names.KIND], m.tokens.items())
        hist = HistogramMetricFamily(names.TENANT_TTFT, "Time to first token per tenant.",
                                     labels=[names.VERSION, names.TENANT])
        for (version, tenant), h in sorted(m.ttft.items()):
            hist.add_metric([version, tenant], h.buckets(), h.total)
        yield hist
        yield _counter(names.TENANT_OVERFLOW, "Requests whose tenant was not their label: other (past the cap), "
                       "untrusted (a tenant header from a peer not in trusted_peers: ignored), too_long.",
                       [names.REASON], [((r,), self.labels.overflow.get(r, 0)) for r in OVERFLOW_REASONS])

