"""The vLLM 0.33 `/metrics` families the simulator exposes: names, types, HELP text, labels, buckets.

Copied from vLLM 0.33.0's own exposition (tests/fixtures/vllm/generated_vllm-0.33.0_single-engine.prom);
a unit test compares this table with the fixture. Names here are vLLM's (without the `vllm:` prefix
and without `_total`), not the observer's own export names, which live in observer.conventions.
"""

from __future__ import annotations

from dataclasses import dataclass

from observer.conventions import vllm

PREFIX = "vllm:"

TTFT_BUCKETS = vllm.TTFT_EDGES
ITL_BUCKETS = vllm.ITL_EDGES
PHASE_BUCKETS = vllm.REQUEST_EDGES
TOKEN_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0)
ITERATION_BUCKETS = (1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0,
                     16384.0)
N_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0)
PREEMPTION_BUCKETS = (1.0, 2.0, 3.0, 4.0, 5.0, 10.0, 20.0)


@dataclass(frozen=True)
class Family:
    """One vLLM metric family: `label` is its one extra label (besides engine, model_name), if any."""

    name: str
    type: str
    help: str
    buckets: tuple[float, ...] = ()
    label: str | None = None
    values: tuple[str, ...] = ()
    engine: bool = True


FAMILIES: tuple[Family, ...] = (
    Family('estimated_flops_per_gpu', 'counter',
           'Estimated number of floating point operations per GPU (for Model Flops '
           'Utilization calculations).'),
    Family('estimated_read_bytes_per_gpu', 'counter',
           'Estimated number of bytes read from memory per GPU (for Model Flops Utilization '
           'calculations).'),
    Family('estimated_write_bytes_per_gpu', 'counter',
           'Estimated number of bytes written to memory per GPU (for Model Flops Utilization'
           ' calculations).'),
    Family('num_requests_running', 'gauge',
           'Number of requests in model execution batches.'),
    Family('num_requests_waiting', 'gauge',
           'Number of requests waiting to be processed.'),
    Family('num_requests_waiting_by_reason', 'gauge',
           "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
           "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
           'budget, KV transfer, blocked status). Sum of all reasons equals '
           'vllm:num_requests_waiting.',
           label='reason', values=('capacity', 'deferred')),
    Family('engine_sleep_state', 'gauge',
           'Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine '
           'is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep'
           ' level 2.',
           label='sleep_state', values=('awake', 'weights_offloaded', 'discard_all')),
    Family('kv_cache_usage_perc', 'gauge',
           'KV-cache usage. 1 means 100 percent usage.'),
    Family('prefix_cache_queries', 'counter',
           'Prefix cache queries, in terms of number of queried tokens.'),
    Family('prefix_cache_hits', 'counter',
           'Prefix cache hits, in terms of number of cached tokens.'),
    Family('external_prefix_cache_queries', 'counter',
           'External prefix cache queries from KV connector cross-instance cache sharing, in'
           ' terms of number of queried tokens.'),
    Family('external_prefix_cache_hits', 'counter',
           'External prefix cache hits from KV connector cross-instance cache sharing, in '
           'terms of number of cached tokens.'),
    Family('mm_cache_queries', 'counter',
           'Multi-modal cache queries, in terms of number of queried items.'),
    Family('mm_cache_hits', 'counter',
           'Multi-modal cache hits, in terms of number of cached items.'),
    Family('num_preemptions', 'counter',
           'Cumulative number of preemption from the engine.'),
    Family('prompt_tokens', 'counter',
           'Number of prefill tokens processed.'),
    Family('prompt_tokens_by_source', 'counter',
           'Number of prompt tokens by source.',
           label='source', values=('local_compute', 'local_cache_hit', 'external_kv_transfer')),
    Family('prompt_tokens_cached', 'counter',
           'Number of cached prompt tokens (local + external).'),
    Family('prompt_tokens_cached_by_source', 'counter',
           'Prefix-cache hit tokens by the cache tier that supplied them: device (local '
           'HBM), host (offloaded to DRAM), disk, p2p (transferred from another vLLM '
           'instance) or external_unspecified. Counted at admission; sums to '
           'vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.',
           label='source', values=('device', 'host', 'p2p', 'disk', 'external_unspecified')),
    Family('generation_tokens', 'counter',
           'Number of generation tokens processed.'),
    Family('request_success', 'counter',
           'Count of successfully processed requests.',
           label='finished_reason', values=('stop', 'length', 'abort', 'error', 'repetition')),
    Family('admission_rejections', 'counter',
           'Number of admission attempts rejected by a queue limit, by reason.',
           label='reason', values=('max_num_queued_reqs', 'max_num_queued_tokens'),
           engine=False),
    Family('request_prompt_tokens', 'histogram',
           'Number of prefill tokens processed.',
           buckets=TOKEN_BUCKETS),
    Family('request_generation_tokens', 'histogram',
           'Number of generation tokens processed.',
           buckets=TOKEN_BUCKETS),
    Family('iteration_tokens_total', 'histogram',
           'Histogram of number of tokens per engine_step.',
           buckets=ITERATION_BUCKETS),
    Family('request_max_num_generation_tokens', 'histogram',
           'Histogram of maximum number of requested generation tokens.',
           buckets=TOKEN_BUCKETS),
    Family('request_params_n', 'histogram',
           'Histogram of the n request parameter.',
           buckets=N_BUCKETS),
    Family('request_params_max_tokens', 'histogram',
           'Histogram of the max_tokens request parameter.',
           buckets=TOKEN_BUCKETS),
    Family('time_to_first_token_seconds', 'histogram',
           'Histogram of time to first token in seconds.',
           buckets=TTFT_BUCKETS),
    Family('inter_token_latency_seconds', 'histogram',
           'Histogram of inter-token latency in seconds.',
           buckets=ITL_BUCKETS),
    Family('request_time_per_output_token_seconds', 'histogram',
           'Histogram of time_per_output_token_seconds per request.',
           buckets=ITL_BUCKETS),
    Family('e2e_request_latency_seconds', 'histogram',
           'Histogram of e2e request latency in seconds.',
           buckets=PHASE_BUCKETS),
    Family('request_queue_time_seconds', 'histogram',
           'Histogram of time spent in WAITING phase for request.',
           buckets=PHASE_BUCKETS),
    Family('request_inference_time_seconds', 'histogram',
           'Histogram of time spent in RUNNING phase for request.',
           buckets=PHASE_BUCKETS),
    Family('request_prefill_time_seconds', 'histogram',
           'Histogram of time spent in PREFILL phase for request.',
           buckets=PHASE_BUCKETS),
    Family('request_decode_time_seconds', 'histogram',
           'Histogram of time spent in DECODE phase for request.',
           buckets=PHASE_BUCKETS),
    Family('request_num_preemptions', 'histogram',
           'Histogram of the number of times a request was preempted.',
           buckets=PREEMPTION_BUCKETS),
    Family('request_prefill_kv_computed_tokens', 'histogram',
           'Histogram of new KV tokens computed during prefill (excluding cached tokens).',
           buckets=TOKEN_BUCKETS),
)
"""In vLLM's registration order (the order /metrics lists them)."""

BY_NAME = {f.name: f for f in FAMILIES}

FINISHED_REASONS = BY_NAME["request_success"].values

CACHE_CONFIG_HELP = "Information of the LLMEngine CacheConfig"
CACHE_CONFIG_INFO = {
    "_block_size_resolved": "True", "block_size": "16", "cache_dtype": "auto",
    "cache_hit_alignment_tokens": "None", "effective_attention_block_size": "None",
    "enable_mamba_shared_prefix_checkpoint": "False", "enable_prefix_caching": "True",
    "gpu_memory_utilization": "0.92", "hash_block_size": "None", "is_attention_free": "False",
    "kv_cache_dtype_skip_layers": "[]", "kv_cache_layout": "None", "kv_cache_max_concurrency": "None",
    "kv_cache_memory_bytes": "None", "kv_cache_size_tokens": "None", "kv_offloading_backend": "native",
    "kv_offloading_size": "None", "kv_sharing_fast_prefill": "False", "mamba_block_size": "None",
    "mamba_cache_dtype": "auto", "mamba_cache_mode": "none", "mamba_page_size_padded": "None",
    "mamba_ssm_cache_dtype": "float32", "num_cpu_blocks": "None", "num_gpu_blocks": "None",
    "num_gpu_blocks_override": "None", "prefix_cache_retention_interval": "0",
    "prefix_caching_hash_algo": "sha256", "prefix_match_unit": "None", "replayssm_buffer_len": "16",
    "simple_cpu_offload_num_blocks": "None", "skip_page_size_padded": "None", "sliding_window": "None",
    "swa_bounded_replay": "True", "use_kda_recoverssm": "False", "use_replayssm": "False",
    "user_specified_block_size": "False",
}
"""Labels of vllm:cache_config_info as vLLM 0.33 prints them (value always 1)."""

HTTP_REQUESTS_HELP = "Total number of requests by method, status and handler."

ENGINE_HEALTHY_HELP = "Whether the engine reports healthy under fault tolerance."
"""vllm:engine_healthy{engine} as vLLM's main branch (after 0.33) serves it with --enable-fault-tolerance."""
