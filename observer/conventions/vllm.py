"""The *input* vocabulary: vLLM's latency families, their ids, default bucket edges and `le` label text.

One place for what the observer reads (the output names live in `metrics` and `labels`): the canary's
latency metrics, the SLO config, the exporter, the simulator and the Argo/alert renderers all use these.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Literal

from prometheus_client.utils import floatToGoString

LatencyId = Literal["ttft", "itl", "e2e", "queue", "router_ttft"]
LATENCY_IDS: tuple[LatencyId, ...] = ("ttft", "itl", "e2e", "queue", "router_ttft")
"""`router_ttft` is the TTFT a router in front of vLLM measures (llm-d EPP, Dynamo; observer.conventions.routers):
the engine's TTFT plus the time the request waited at the gateway."""

# The SLO section has always spelled inter-token latency `inter_token`; it is the same family as `itl`.
SLO_ALIASES: dict[str, LatencyId] = {"inter_token": "itl"}

# Parsed vLLM family keys (observer.collect.vllm strips the `vllm:`/`vllm_` prefix and `_bucket`).
FAMILY: dict[LatencyId, str] = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "e2e": "e2e_request_latency_seconds",
    "queue": "request_queue_time_seconds",
    "router_ttft": "router_ttft_seconds",  # observer.conventions.routers.TTFT: not a vLLM family
}

# vLLM's default bucket edges (unchanged 0.8.5 → 0.33). Overridable in vLLM ≥ 0.32 with
# --custom-histogram-buckets: then list the deployed edges in the SLO's `bucket_edges`.
TTFT_EDGES: tuple[float, ...] = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                                 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_EDGES: tuple[float, ...] = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                                10.0, 20.0, 40.0, 80.0)
# e2e, queue, inference, prefill and decode time share one set of edges.
REQUEST_EDGES: tuple[float, ...] = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ROUTER_TTFT_EDGES: tuple[float, ...] = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0,
                                         5.0, 6.0, 8.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0)
"""llm-d EPP's `llm_d_epp_request_ttft_seconds` buckets (Dynamo's are log-spaced and configurable)."""
DEFAULT_EDGES: dict[LatencyId, tuple[float, ...]] = {
    "ttft": TTFT_EDGES, "itl": ITL_EDGES, "e2e": REQUEST_EDGES, "queue": REQUEST_EDGES,
    "router_ttft": ROUTER_TTFT_EDGES,
}


# vLLM ≥ 0.32 `--custom-histogram-buckets` family keys (vllm/v1/metrics/buckets.py): e2e and queue time share
# `request_latency`.
BUCKET_FAMILY: dict[LatencyId, str] = {  # no router_ttft: the router's buckets are not vLLM's flag
    "ttft": "time_to_first_token", "itl": "inter_token_latency", "e2e": "request_latency", "queue": "request_latency",
}


def has_edge(edges: Iterable[float], seconds: float) -> bool:
    """Whether `seconds` is one of the bucket edges (compared as floats, not as `le` text)."""
    return any(math.isclose(seconds, e, rel_tol=1e-9) for e in edges)


def custom_buckets_flag(family: LatencyId, edge: float, edges: tuple[float, ...] | None = None) -> str:
    """The vLLM (≥ 0.32) flag that adds `edge` to the buckets of `family` (its defaults, or `edges`)."""
    bounds = sorted({*(edges or DEFAULT_EDGES[family]), edge})
    listed = ", ".join(f"{b:g}" for b in bounds)
    return f"--custom-histogram-buckets '{{\"{BUCKET_FAMILY[family]}\": [{listed}]}}'"


def latency_id(name: str) -> LatencyId:
    """The canonical id of a latency family named by id or by the SLO alias (`inter_token` → `itl`)."""
    canonical = SLO_ALIASES.get(name, name)
    if canonical not in LATENCY_IDS:
        raise KeyError(f"unknown latency family {name!r}; known: {', '.join(LATENCY_IDS)}")
    return canonical


def format_le(edge: float) -> str:
    """The `le` label text of a bucket edge as prometheus_client writes it ("2.5", "1.0", "+Inf");
    PromQL matches `le` by exact text."""
    return str(floatToGoString(edge))  # type: ignore[no-untyped-call]


# --- every vLLM family the observer knows, and what it does with it ---------------------------------
# Today's names (after observer.collect.vllm's renames), without the `vllm:` prefix and `_total`.
# A family vLLM exposes that is in neither map is a new release's addition: tests/unit/test_vllm_families.py
# and the real-engine tier fail on it, so it gets a decision, never silence.

TTFT = FAMILY["ttft"]
ITL = FAMILY["itl"]
E2E = FAMILY["e2e"]
QUEUE = FAMILY["queue"]
REQUEST_SUCCESS = "request_success"
HTTP_STATUS = "http_status"
"""Labelled counter the parser adds from vLLM's HTTP instrumentator (`http_requests_total{handler,status}`, no
`vllm:` prefix, no model label): responses of the generation handlers by status class (2xx, 4xx, 5xx),
attributed to the target's model when it serves exactly one. vLLM < 0.13 has no `error` finish reason; its
failed requests show here as 5xx."""
GENERATION_HANDLERS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})
PROMPT_TOKENS = "prompt_tokens"
GENERATION_TOKENS = "generation_tokens"
PREEMPTIONS = "num_preemptions"
PREFIX_QUERIES = "prefix_cache_queries"
PREFIX_HITS = "prefix_cache_hits"
RUNNING = "num_requests_running"
WAITING = "num_requests_waiting"
KV_CACHE = "kv_cache_usage_perc"
PREFILL = "request_prefill_time_seconds"
DECODE = "request_decode_time_seconds"
PROMPT_LENGTH = "request_prompt_tokens"
GENERATION_LENGTH = "request_generation_tokens"
MAX_GENERATION_TOKENS = "request_max_num_generation_tokens"
TPOT = "request_time_per_output_token_seconds"  # per request (vLLM ≥ 0.11); ITL_EDGES
ADMISSION_REJECTIONS = "admission_rejections"
"""Requests refused by a queue limit (vLLM ≥ 0.32, `--max-num-queued-reqs`/`--max-num-queued-tokens`), by reason;
answered 503 before the engine, so they are in no finished-request count."""
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
"""The reasons vLLM knows today; any other value is counted as `other` (a bounded label)."""
SPEC_DRAFT_TOKENS = "spec_decode_num_draft_tokens"
SPEC_ACCEPTED_TOKENS = "spec_decode_num_accepted_tokens"
SPEC_DECODE = "spec_decode_tokens"
"""Labelled counter the parser adds from the two above (speculative decoding, when enabled): draft tokens by
`accepted` / `rejected`, so the canary's acceptance ratio can be cut into slices like finished requests."""
CORRUPTED_REQUESTS = "corrupted_requests"
"""Finished requests with NaNs in their logits (vLLM ≥ 0.12, only with VLLM_COMPUTE_NANS_IN_LOGITS=1): garbage
answers that finished like any other, so no error count sees them."""
CORRUPTION = "request_corruption"
"""Labelled counter the parser adds from the one above ({corrupted: n}), so the canary can cut it into slices like
finished requests."""
PROMPT_TOKENS_BY_SOURCE = "prompt_tokens_by_source"
"""Prompt tokens by where their KV came from (vLLM ≥ 0.16): `local_compute` (prefilled here), `local_cache_hit`,
`external_kv_transfer` (a KV connector, disaggregated prefill)."""
COMPUTED_SOURCE = "local_compute"
"""The prefill work the engine did: the prompt tokens cost and energy per computed token divide by."""
ENGINE_HEALTHY = "engine_healthy"
"""1/0 per data-parallel rank, with `--enable-fault-tolerance` (vLLM main, after 0.33): only an `engine` label, no
`model_name`, so it is attributed to every model the target serves."""
SLEEP_STATE = "engine_sleep_state"
"""Sleep mode (vLLM ≥ 0.11): one series per state (`awake`, `weights_offloaded`, `discard_all`) per engine; the
engine sleeps when `awake` is 0."""

MAPPED: dict[str, str] = {
    TTFT: "observer_ttft_seconds histogram, window quantiles, SLOs, canary latency",
    ITL: "observer_itl_seconds histogram, window quantiles, canary latency",
    E2E: "observer_e2e_seconds histogram, window quantiles, SLOs, canary latency",
    QUEUE: "observer_queue_seconds histogram, canary latency",
    REQUEST_SUCCESS: "observer_requests_total by finished_reason (repetition included), error SLI, canary errors",
    PROMPT_TOKENS: "observer_prompt_tokens_total",
    GENERATION_TOKENS: "observer_generation_tokens_total",
    PREEMPTIONS: "observer_preemptions_total",
    PREFIX_QUERIES: "prefix-cache hit ratio (with prefix_cache_hits)",
    PREFIX_HITS: "prefix-cache hit ratio",
    RUNNING: "running requests per version, saturation",
    WAITING: "queued requests per version, saturation alert",
    KV_CACHE: "KV-cache usage (mean and max over engines)",
    PREFILL: "observer_prefill_seconds histogram (dashboard)",
    DECODE: "observer_decode_seconds histogram (dashboard)",
    PROMPT_LENGTH: "observer_prompt_length_tokens histogram (dashboard, drift features)",
    GENERATION_LENGTH: "observer_generation_length_tokens histogram (dashboard)",
    MAX_GENERATION_TOKENS: "observer_max_generation_tokens histogram (dashboard)",
    TPOT: "observer_time_per_output_token_seconds histogram, goodput SLI",
    ADMISSION_REJECTIONS: "observer_admission_rejections_total by reason (bounded), canary errors (a floor under "
                          "5xx), load-shedding alert",
    ENGINE_HEALTHY: "replicas with an unhealthy engine: the canary verdict is inconclusive, never pass; hung-engine "
                    "alert",
    SLEEP_STATE: "replicas asleep: an asleep arm is judged idle, never nodata that pages, never fail",
    SPEC_DRAFT_TOKENS: "observer_spec_decode_tokens_total{outcome} (with the accepted tokens), the optional canary "
                       "ratio metric `spec_decode: true`",
    SPEC_ACCEPTED_TOKENS: "observer_spec_decode_tokens_total{outcome=accepted}",
    CORRUPTED_REQUESTS: "observer_corrupted_requests_total, the optional canary ratio metric `corrupted: true` "
                        "(over finished requests)",
    PROMPT_TOKENS_BY_SOURCE: "observer_prompt_tokens_computed_total (source local_compute: the prefill the engine "
                             "did), cost and energy per computed token (kind `computed`)",
}
"""Family → where it goes."""

IGNORED: dict[str, str] = {
    "cache_config_info": "engine cache settings as labels; configuration, not a signal",
    "estimated_flops_per_gpu": "MFU estimate; 0 on the CPU build, planned with cost and energy per token",
    "estimated_read_bytes_per_gpu": "memory-bandwidth estimate; 0 on the CPU build",
    "estimated_write_bytes_per_gpu": "memory-bandwidth estimate; 0 on the CPU build",
    "external_prefix_cache_hits": "KV-connector (offload) cache; absent without a connector",
    "external_prefix_cache_queries": "KV-connector (offload) cache; absent without a connector",
    "iteration_tokens_total": "tokens per engine step (batch size); a capacity signal, not a per-version SLI",
    "mm_cache_hits": "multimodal processor cache; text models only here",
    "mm_cache_queries": "multimodal processor cache; text models only here",
    "num_requests_waiting_by_reason": "breakdown of num_requests_waiting (which is used)",
    "prompt_tokens_cached": "covered by the prefix-cache hit ratio",
    "prompt_tokens_cached_by_source": "breakdown of prompt_tokens_cached",
    "request_inference_time_seconds": "prefill + decode, both of which are used",
    "request_num_preemptions": "per-request preemptions; the num_preemptions counter is used",
    "request_params_max_tokens": "a request parameter, not the engine's behaviour",
    "request_params_n": "a request parameter (parallel samples)",
    "request_prefill_kv_computed_tokens": "prefill work per request; the prompt_tokens_by_source counter "
                                          "(local_compute) carries the same work as a total",
    "num_requests_kv_fetch_by_stage": "waiting requests by async KV-load stage (KV connectors only); a breakdown "
                                      "of num_requests_waiting",
    "watermark_requests": "finished requests by watermark status; only with a watermark_config",
    "kv_block_lifetime_seconds": "opt-in KV-residency sampling (--kv-cache-metrics): cache tuning, not a "
                                 "per-version service signal",
    "kv_block_idle_before_evict_seconds": "opt-in KV-residency sampling (--kv-cache-metrics)",
    "kv_block_reuse_gap_seconds": "opt-in KV-residency sampling (--kv-cache-metrics)",
    "lora_requests_info": "running and waiting LoRA adapters as label values; adapters are versions by model name",
    "estimated_flops_per_gpu_total": "MFU estimate (the 0.33 counter); 0 on the CPU build",
    "estimated_read_bytes_per_gpu_total": "memory-bandwidth estimate (the 0.33 counter); 0 on the CPU build",
    "estimated_write_bytes_per_gpu_total": "memory-bandwidth estimate (the 0.33 counter); 0 on the CPU build",
    "spec_decode_num_accepted_tokens_per_pos": "speculative-decoding acceptance per draft position; the totals "
                                               "(spec_decode_num_draft_tokens, _accepted_tokens) carry the canary's "
                                               "acceptance ratio",
    "spec_decode_num_drafts": "verification steps with a draft; the token counters carry the acceptance",
    "sleep_mode_operation_duration_seconds": "sleep/wake operations of the dev endpoints; not a serving signal",
    "sleep_mode_operations_in_flight": "sleep/wake operations in flight; not a serving signal",
    "rl_weight_update_operation_duration_seconds": "online-RL weight transfers; not a serving signal",
    "rl_weight_update_operations_in_flight": "online-RL weight transfers in flight; not a serving signal",
    "websocket_connections_active": "realtime speech-to-text WebSocket sessions; text generation only here",
    "websocket_connections_total": "realtime speech-to-text WebSocket sessions",
    "websocket_connection_duration_seconds": "realtime speech-to-text WebSocket sessions",
}
"""Family → why the observer does not use it (carried through parsing, never exported)."""

IGNORED_PREFIXES: dict[str, str] = {
    "simple_kv_offload_": "the CPU/disk KV-offload connector's internals; absent without it",
    "mooncake_": "the Mooncake KV-transfer connector's internals (disaggregated prefill)",
    "nixl_": "the NIXL KV-transfer connector's internals (disaggregated prefill)",
    "hf3fs_": "the HF3FS KV connector's internals",
    "hisparse_": "the HiSparse KV connector's internals",
    "umbp_": "the UMBP KV connector's internals",
}
"""Family-name prefix → why a whole connector's families are not used."""


def decision(family: str) -> str | None:
    """Where a family goes, or why it is not used; None when no decision was made (a new family)."""
    if family in MAPPED:
        return MAPPED[family]
    if family in IGNORED:
        return IGNORED[family]
    return next((why for prefix, why in IGNORED_PREFIXES.items() if family.startswith(prefix)), None)
