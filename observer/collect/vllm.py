"""vLLM metrics normalisation: `vllm:`/`vllm_` spellings, renamed families mapped to today's names
(never double-counted), `engine` aggregated, unknown families ignored.

Tolerates every V1 release from 0.8.5 to 0.33 (tests/fixtures/vllm-metrics/) and the old V0 engine
(no `engine` label). Families the observer does not use are still normalised when they carry
`model_name`, so `observer scrape` shows them; anything else is counted as ignored.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from observer.collect.model import Histogram, ModelMetrics, VllmScrape
from observer.collect.promtext import Family, Sample, parse
from observer.conventions.vllm import (
    ADMISSION_REASONS,
    ADMISSION_REJECTIONS,
    CORRUPTED_REQUESTS,
    CORRUPTION,
    ENGINE_HEALTHY,
    GENERATION_HANDLERS,
    HTTP_STATUS,
    SLEEP_STATE,
    SPEC_ACCEPTED_TOKENS,
    SPEC_DECODE,
    SPEC_DRAFT_TOKENS,
)
from observer.errors import SampleLimitError

PREFIXES = ("vllm:", "vllm_")

RENAMES: dict[str, str] = {
    # deprecated 0.9.2, hidden 0.11, removed 0.12
    "gpu_cache_usage_perc": "kv_cache_usage_perc",
    "gpu_prefix_cache_queries": "prefix_cache_queries",
    "gpu_prefix_cache_hits": "prefix_cache_hits",
    # deprecated 0.11, hidden 0.12-0.14, removed 0.15 (same per-decode-step observations)
    "time_per_output_token_seconds": "inter_token_latency_seconds",
}
"""Old family name (without prefix and `_total`) → today's name. When both are exposed the new one wins."""

RATIO_GAUGES = frozenset({"kv_cache_usage_perc"})
"""Gauges averaged over engines (the others, request counts, are summed)."""

_OWN_LABELS = frozenset({"model_name", "engine"})


@dataclass
class _ModelAcc:
    engines: set[str] = field(default_factory=set)
    hist_buckets: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    hist_sum: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    hist_count: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    gauge_values: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    counters: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    labelled: dict[str, dict[str, float]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(float)))
    awake: dict[str, float] | None = None  # engine → its `awake` sleep-state value


def _base_name(family: Family) -> str | None:
    name = family.name
    for prefix in PREFIXES:
        if name.startswith(prefix):
            base = name[len(prefix):]
            break
    else:
        return None
    if family.type == "counter" and base.endswith("_total"):
        base = base[: -len("_total")]
    if family.type == "untyped" and base.endswith("_total"):
        base = base[: -len("_total")]
    return base


def _extra_key(labels: tuple[tuple[str, str], ...]) -> str | None:
    extra = [(k, v) for k, v in labels if k not in _OWN_LABELS]
    if not extra:
        return None
    if len(extra) == 1:
        return extra[0][1]
    return ",".join(f"{k}={v}" for k, v in extra)


def _label(labels: tuple[tuple[str, str], ...], name: str) -> str | None:
    for k, v in labels:
        if k == name:
            return v
    return None


def _select(families: list[Family]) -> tuple[dict[str, Family], int]:
    """Pick one family per today's name: a renamed old family only when the new one is absent."""
    chosen: dict[str, tuple[Family, bool]] = {}
    ignored = 0
    for fam in families:
        base = _base_name(fam)
        if base is None:
            ignored += 1
            continue
        if base.endswith("_created") and fam.type in ("gauge", "untyped"):
            continue  # prometheus_client's companion series, not a signal
        canonical = RENAMES.get(base, base)
        is_old = base in RENAMES
        prev = chosen.get(canonical)
        if prev is None or (prev[1] and not is_old):
            chosen[canonical] = (fam, is_old)
    return {k: v[0] for k, v in chosen.items()}, ignored


def _add(acc: _ModelAcc, name: str, kind: str, s: Sample) -> None:
    if s.name.endswith("_created"):
        return
    if name == SLEEP_STATE:
        if acc.awake is None:
            acc.awake = {}
        if _label(s.labels, "sleep_state") == "awake":
            acc.awake[_label(s.labels, "engine") or ""] = s.value
        return
    if kind == "histogram":
        if s.name.endswith("_bucket"):
            le = _label(s.labels, "le")
            if le is not None:
                buckets = acc.hist_buckets[name]
                buckets[le] = buckets.get(le, 0.0) + s.value
        elif s.name.endswith("_sum"):
            acc.hist_sum[name] += s.value
        elif s.name.endswith("_count"):
            acc.hist_count[name] += s.value
        return
    extra = _extra_key(s.labels)
    if name == ADMISSION_REJECTIONS and extra is not None and extra not in ADMISSION_REASONS:
        extra = "other"  # a reason a newer vLLM adds: counted, under a bounded label value
    if kind == "counter" or (kind == "untyped" and s.name.endswith("_total")):
        if extra is None:
            acc.counters[name] += s.value
        else:
            acc.labelled[name][extra] += s.value
    elif kind in ("gauge", "untyped") and extra is None:
        acc.gauge_values[name].append(s.value)


# The cache settings that change what a request costs or how it is served, read from vllm:cache_config_info
# for the canary's same-environment check. Left out: sizes vLLM derives from the GPU (num_gpu_blocks, …),
# which differ between healthy pods, and labels that are new in one release (their absence is no difference).
ENGINE_ARG_KEYS = ("block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization",
                   "kv_cache_dtype", "prefix_caching_hash_algo", "sliding_window", "swap_space")
ENGINE_ARGS = "engine_args"  # the info key (and environment fact) they are joined into
MAX_ENGINE_ARGS_CHARS = 240


def engine_args(families: list[Family]) -> str | None:
    """`key=value,…` of ENGINE_ARG_KEYS from cache_config_info (engine 0's), or None without the family."""
    for fam in families:
        if fam.name.removeprefix("vllm:").removeprefix("vllm_") != "cache_config_info" or not fam.samples:
            continue
        labels = dict(min(fam.samples, key=lambda s: _label(s.labels, "engine") or "").labels)
        text = ",".join(f"{k}={labels[k][:40]}" for k in ENGINE_ARG_KEYS if k in labels)
        return text[:MAX_ENGINE_ARGS_CHARS] or None
    return None


def _http_statuses(families: list[Family]) -> dict[str, float]:
    """Responses of the generation handlers by status class from `http_requests_total` (summed over methods)."""
    out: dict[str, float] = defaultdict(float)
    for fam in families:
        if fam.name not in ("http_requests", "http_requests_total") or fam.type not in ("counter", "untyped"):
            continue
        for s in fam.samples:
            if s.name.endswith("_created") or _label(s.labels, "handler") not in GENERATION_HANDLERS:
                continue
            status = _label(s.labels, "status")
            if status and math.isfinite(s.value):
                out[status[:8]] += s.value
    return dict(out)


def _unhealthy(families: list[Family]) -> int | None:
    """Engines of the target reporting `engine_healthy` 0 (it has only an `engine` label); None without it."""
    for fam in families:
        if _base_name(fam) != ENGINE_HEALTHY:
            continue
        return sum(1 for s in fam.samples if math.isfinite(s.value) and s.value < 0.5)
    return None


def histogram_from_buckets(buckets: dict[str, float], total_sum: float, count: float) -> Histogram | None:
    """A Histogram from `le` text → cumulative count (None without the +Inf bucket); edges sorted, texts kept."""
    edges: list[tuple[float, str, float]] = []
    inf = None
    for le, value in buckets.items():
        try:
            bound = float(le)
        except ValueError:
            continue
        if bound == float("inf"):
            inf = value
        else:
            edges.append((bound, le, value))
    if inf is None:
        return None
    edges.sort()
    return Histogram(bounds=tuple(e[0] for e in edges), cumulative=(*(e[2] for e in edges), inf),
                     sum=total_sum, count=count, le_labels=tuple(e[1] for e in edges))


def normalise(families: list[Family], *, max_models: int | None = None) -> VllmScrape:
    """Map parsed families of one vLLM target to per-model metrics under today's names; SampleLimitError when
    the target reports more than `max_models` models (each becomes a label value downstream)."""
    selected, ignored = _select(families)
    http = _http_statuses(families)
    models: dict[str, _ModelAcc] = defaultdict(_ModelAcc)
    for name, fam in selected.items():
        for s in fam.samples:
            model = _label(s.labels, "model_name")
            if model is None:
                continue
            if max_models is not None and model not in models and len(models) >= max_models:
                raise SampleLimitError(f"more than {max_models} models (scrape.max_models_per_target)")
            acc = models[model]
            engine = _label(s.labels, "engine")
            if engine is not None:
                acc.engines.add(engine)
            _add(acc, name, fam.type, s)
    if http and len(models) == 1:  # one model: the HTTP server's responses are its responses
        next(iter(models.values())).labelled[HTTP_STATUS].update(http)
    args = engine_args(families)
    unhealthy = _unhealthy(families)
    out: dict[str, ModelMetrics] = {}
    for model, acc in models.items():
        histograms = {}
        for name, buckets in acc.hist_buckets.items():
            h = histogram_from_buckets(buckets, acc.hist_sum.get(name, 0.0), acc.hist_count.get(name, 0.0))
            if h is not None:
                histograms[name] = h
        gauges = {n: (sum(v) / len(v) if n in RATIO_GAUGES else sum(v)) for n, v in acc.gauge_values.items()}
        corrupted = acc.counters.get(CORRUPTED_REQUESTS)
        if corrupted is not None:
            acc.labelled[CORRUPTION]["corrupted"] = corrupted
        draft, accepted = acc.counters.get(SPEC_DRAFT_TOKENS), acc.counters.get(SPEC_ACCEPTED_TOKENS)
        if draft is not None and accepted is not None:
            acc.labelled[SPEC_DECODE].update(accepted=accepted, rejected=max(0.0, draft - accepted))
        out[model] = ModelMetrics(
            model=model, histograms=histograms, gauges=gauges,
            gauges_max={n: max(v) for n, v in acc.gauge_values.items()},
            counters=dict(acc.counters), labelled_counters={k: dict(v) for k, v in acc.labelled.items()},
            engines=max(1, len(acc.engines)), info={ENGINE_ARGS: args} if args else {},
            engines_unhealthy=unhealthy,
            engines_asleep=None if acc.awake is None else sum(1 for x in acc.awake.values() if x < 0.5),
        )
    return VllmScrape(models=out, families_seen=len(families), families_ignored=ignored)


def parse_vllm(text: str, *, max_samples: int | None = None, max_models: int | None = None) -> VllmScrape:
    """Parse and normalise one vLLM /metrics body within the per-target limits."""
    return normalise(parse(text, max_samples=max_samples), max_models=max_models)
