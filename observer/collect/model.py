"""Typed results of parsing one scrape: the contract between the parser, the scraper, the signal
computer, the simulator and `observer scrape`.

Family keys are today's vLLM names without the `vllm:` prefix and without `_total`
(e.g. `time_to_first_token_seconds`, `kv_cache_usage_perc`, `request_success`): renamed families
from older releases are already mapped to these names by `collect.vllm`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: `bounds` are the finite upper bounds ascending, `cumulative` has one
    count per bound plus the +Inf bucket last (so len(cumulative) == len(bounds) + 1).
    `le_labels` keeps each bound's label text exactly as exposed (`le` matching is textual in PromQL)."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    sum: float
    count: float
    le_labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelMetrics:
    """One `model_name` of one target, aggregated over `engine` (data-parallel ranks)."""

    model: str
    histograms: Mapping[str, Histogram] = field(default_factory=dict)
    gauges: Mapping[str, float] = field(default_factory=dict)
    gauges_max: Mapping[str, float] = field(default_factory=dict)
    """Per-gauge maximum over engines (e.g. the hottest KV cache); `gauges` holds the engine sum for
    request counts and the engine mean for ratios such as kv_cache_usage_perc."""
    counters: Mapping[str, float] = field(default_factory=dict)
    labelled_counters: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    """Counters with one extra label, keyed by its value, e.g. request_success → {stop: …, length: …}."""
    info: Mapping[str, str] = field(default_factory=dict)
    """Info-style facts read from the target, e.g. max_model_len from vllm:cache_config_info / model config."""
    engines: int = 1
    engines_unhealthy: int | None = None
    """Engines reporting `engine_healthy` 0 (None: the target does not report it)."""
    engines_asleep: int | None = None
    """Engines whose sleep state is not awake (None: the target does not report it)."""


@dataclass(frozen=True)
class VllmScrape:
    """What one vLLM /metrics body says, per model."""

    models: Mapping[str, ModelMetrics]
    families_seen: int = 0
    families_ignored: int = 0


@dataclass(frozen=True)
class RouterScrape:
    """What one router /metrics body says (observer.collect.routers): per routed model (the target model or LoRA
    adapter it sent requests to) TTFT, requests by outcome and requests held; and the pool's state."""

    kind: str
    models: Mapping[str, ModelMetrics]
    saturation: float | None = None
    """llm-d: flow-control pool saturation (stage `effective`; ≥ 1 holds requests back); None: not reported."""
    stale_endpoints: float | None = None
    """llm-d: endpoints whose metrics are missing or stale (scored as saturated); None: not reported."""
    families_seen: int = 0
    twins_skipped: int = 0
    """Deprecated families exposed beside today's name and not read (never counted twice)."""


@dataclass(frozen=True)
class GpuMetrics:
    """One GPU as a DCGM-exporter reports it; None where the exporter does not say."""

    uuid: str
    gpu: str
    hostname: str | None = None
    pod: str | None = None
    namespace: str | None = None
    model_name: str | None = None
    driver_version: str | None = None
    gpu_util_percent: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    fb_reserved_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    energy_mj: float | None = None  # total energy since boot (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ)
    xid: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    gr_engine_active: float | None = None
    ecc_dbe_volatile: float | None = None  # double-bit (uncorrectable) ECC errors since the driver loaded
    ecc_sbe_volatile: float | None = None
    ecc_dbe_aggregate: float | None = None  # over the GPU's lifetime
    ecc_sbe_aggregate: float | None = None
    remapped_rows_uncorrectable: float | None = None
    remapped_rows_correctable: float | None = None
    row_remap_failure: float | None = None  # 1: a row could not be remapped (the GPU needs service)
    power_violation_ns: float | None = None  # time throttled by the power cap (a counter, ns)
    thermal_violation_ns: float | None = None
    clock_event_reasons: float | None = None  # NVML clock throttle (event) reasons now, a bitmask


@dataclass(frozen=True)
class DcgmScrape:
    """What one DCGM-exporter /metrics body says."""

    gpus: tuple[GpuMetrics, ...]
