"""What the signal store computes and keeps per version: window quantiles and rates, GPU signals, the
export snapshot, per-slice totals, and the helpers that compute them from running totals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from observer.analyse import histogram as hmath
from observer.analyse.cost import CostTotals, CostWindow
from observer.analyse.replicas import ColdStarts, ReplicaStat, ReplicaTracker
from observer.analyse.window import History, ModelTotals, Totals
from observer.collect.model import Histogram
from observer.collect.scraper import Target
from observer.config.fleet import VersionSpec
from observer.conventions.labels import EngineState
from observer.jsonsafe import finite

OTHER_REASON = "other"
MULTIPLE_MODELS = "multiple"

@dataclass(frozen=True)
class Quantiles:
    """Window quantiles of one latency histogram; None where no request was observed."""

    p50: float | None
    p95: float | None
    p99: float | None
    count: float
    sum: float


@dataclass(frozen=True)
class GpuSignals:
    """GPU health of one version from its latest DCGM scrapes (ratios 0–1)."""

    gpus: int
    utilization_mean: float | None
    utilization_max: float | None
    framebuffer_used_mean: float | None
    framebuffer_used_max: float | None
    temperature_celsius_mean: float | None
    temperature_celsius_max: float | None
    power_watts_mean: float | None
    power_watts_max: float | None
    tensor_active_mean: float | None
    dram_active_mean: float | None
    gpus_with_xid: int
    """GPUs whose last XID error code is non-zero now."""
    xid_errors_seen: int
    """Changes of a GPU's last-XID code to a new non-zero value since the observer started."""
    models: tuple[str, ...] = ()
    """Distinct DCGM modelName values (the canary's fairness check compares them between arms)."""
    drivers: tuple[str, ...] = ()
    """Distinct driver versions (DCGM_FI_DRIVER_VERSION label)."""
    memory_errors: Mapping[str, float] = field(default_factory=dict)
    """Sums over the version's GPUs of DCGM's ECC and row-remap counters, by kind (dbe_volatile, sbe_volatile,
    dbe_aggregate, sbe_aggregate, remapped_uncorrectable, remapped_correctable, remap_failures); a kind
    no GPU reports is absent."""
    throttle_seconds: Mapping[str, float] = field(default_factory=dict)
    """Sums of DCGM's power and thermal violation counters over the version's GPUs, in seconds, by reason."""
    clock_throttled: Mapping[str, int] = field(default_factory=dict)
    """GPUs of the version whose clocks are slowed now, by NVML reason (names.CLOCK_THROTTLE_REASONS); empty
    when no GPU reports the field."""


@dataclass(frozen=True)
class VersionSignals:
    """The signals of one version over the window (None: not enough data; never NaN)."""

    version: str
    model: str | None
    models: tuple[str, ...]
    ts: float
    window_seconds: float
    """Seconds actually covered (shorter than the configured window just after start)."""
    replicas_up: int
    replicas_total: int
    ttft: Quantiles | None
    itl: Quantiles | None
    e2e: Quantiles | None
    queue: Quantiles | None
    requests: float | None
    request_rate: float | None
    prompt_token_rate: float | None
    generation_token_rate: float | None
    preemption_rate: float | None
    finished_ratio: Mapping[str, float]
    prefix_cache_hit_ratio: float | None
    queue_depth_per_replica: float | None
    running_requests: float | None
    """Running requests over all replicas (window mean)."""
    kv_cache_mean: float | None
    kv_cache_max: float | None
    gpu: GpuSignals | None
    replicas_in_state: Mapping[EngineState, int] = field(default_factory=dict)
    """Replicas up in each engine state that is not plain serving (conventions.EngineState: unhealthy, asleep,
    hung); a state no replica is in is absent."""
    router_ttft: Quantiles | None = None
    """Window quantiles of the TTFT the router in front of the version measured (gateway queueing included)."""
    router_saturated: bool = False
    """The router's pool is saturated or has endpoints with stale metrics now (llm-d flow control)."""
    router_trouble_at: float | None = None
    """When the router last reported its pool saturated or endpoints stale (None: never, or no router)."""
    router_trouble: str = ""
    """What it reported then, in words."""
    router_queued: float | None = None
    """Requests of this version held at the router now (llm-d flow control queue, Dynamo's HTTP queue)."""

    def in_state(self, state: EngineState) -> int:
        """Replicas in engine state `state` (0 when none is)."""
        return self.replicas_in_state.get(state, 0)


@dataclass(frozen=True)
class GaugePoint:
    replicas_up: int
    waiting: float
    running: float
    kv_mean: float | None
    kv_max: float | None


@dataclass(frozen=True)
class VersionExport:
    """What the exporter needs of one version: its signals and summed running totals."""

    signals: VersionSignals
    totals: Totals | None
    xid_errors_seen: int
    cost: CostTotals | None = None
    cost_window: CostWindow | None = None
    engine_restarts: int = 0
    """Restarts of the version's vLLM servers seen since the observer started (counter resets)."""
    replicas: tuple[ReplicaStat, ...] = ()
    """Per replica (pod, else host:port of its target): window TTFT p95, request share, outlier test."""
    cold_starts: ColdStarts | None = None
    """Pod start → first good scrape of the version's pods that started while the observer watched."""
    prompt_tokens_computed: float | None = None
    """Running total of the prompt tokens its engines prefilled (None: not every replica reports it)."""


@dataclass(frozen=True)
class Snapshot:
    """Immutable view of the store after a cycle, read by the exporter and the JSON API."""

    ts: float | None
    cycles: int
    window_seconds: float
    versions: Mapping[str, VersionExport] = field(default_factory=dict)


def mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def quantiles(h: Histogram | None) -> Quantiles | None:
    """p50/p95/p99 of `h` with histogram_quantile semantics; None when `h` is None."""
    if h is None:
        return None
    return Quantiles(p50=finite(hmath.quantile(0.5, h)), p95=finite(hmath.quantile(0.95, h)),
                     p99=finite(hmath.quantile(0.99, h)), count=h.count, sum=h.sum)


MAX_SLICES = 240
"""Most slices one window is cut into (4 h of one-minute slices)."""


def histogram_between(new: Totals, old: Totals, family: str) -> Histogram | None:
    """Bucket increase of `family` from snapshot `old` to `new` (None when `new` lacks it)."""
    h = new.histogram(family)
    return None if h is None else hmath.delta(h, old.histogram(family))


def labelled_between(new: Totals, old: Totals, family: str) -> dict[str, float] | None:
    """Per-label increase of `family` from snapshot `old` to `new` (None when `new` lacks it)."""
    lab = new.labelled(family)
    if lab is None:
        return None
    prev = old.labelled(family) or {}
    return {k: x - prev.get(k, 0.0) for k, x in lab.items()}


MAX_DEPARTED = 16  # frozen per-pod totals kept apart; more are summed into one


@dataclass(frozen=True)
class SliceTotals:
    """Increases of one version's histograms and labelled counters over one time slice [start, end)."""

    start: float
    end: float
    histograms: Mapping[str, Histogram]
    labelled: Mapping[str, Mapping[str, float]]


@dataclass
class VersionState:
    spec: VersionSpec
    vllm: tuple[Target, ...]
    dcgm: tuple[Target, ...]
    totals: History[Totals]
    gauges: History[GaugePoint]
    signals: VersionSignals | None = None
    models_seen: set[str] = field(default_factory=set)
    ignored: set[tuple[Target, str]] = field(default_factory=set)
    xid_seen: int = 0
    restarts: int = 0
    departed: list[ModelTotals] = field(default_factory=list)  # frozen counts of pods that left
    replicas: ReplicaTracker | None = None
    cold_starts: ColdStarts = field(default_factory=ColdStarts)
    routers: tuple[Target, ...] = ()
    router_trouble_at: float | None = None
    router_trouble: str = ""


def replica_name(spec: VersionSpec, index: int, url: str) -> str:
    """The replica label of a version's `index`-th vLLM target: its pod when the pods line up with the
    targets (discovery, or a config listing both), else the target's host:port (bounded by config)."""
    if len(spec.pods) == len(spec.vllm) and index < len(spec.pods):
        return spec.pods[index].pod[:63]
    return (urlsplit(url).netloc or url)[:63]
