"""Label names. Every label value is bounded: config names, enum members or histogram edges, never text."""

from __future__ import annotations

from enum import StrEnum

VERSION = "version"
MODEL = "model"
QUANTILE = "quantile"
FINISHED_REASON = "finished_reason"
LE = "le"
KIND = "kind"  # target kind: vllm | dcgm; token kind on cost ratios: prompt | generation | total
GPU_MODEL = "gpu_model"  # DCGM modelName (bounded by cost.max_gpu_models, then "other")
GPU_DRIVER = "gpu_driver"  # DCGM_FI_DRIVER_VERSION label (one per node image)
ENGINE_VERSION = "engine_version"  # vLLM's release from its /version (`mixed` when replicas differ)
WEIGHTS = "weights"  # the weights a version's engine loaded (/v1/models `root`: a path or a hub id), bounded
ENGINE_ARGS = "engine_args"  # vLLM cache settings from cache_config_info, key=value joined (bounded text)


class TokenKind(StrEnum):
    """Which tokens a cost or energy ratio is per (the `kind` label on them)."""

    PROMPT = "prompt"
    GENERATION = "generation"
    TOTAL = "total"
    COMPUTED = "computed"
    """The prompt tokens the engine prefilled (cache hits and KV transfers left out) plus the generated ones: the
    work done; only where every replica reports vLLM's prompt_tokens_by_source."""


TOKEN_KINDS: tuple[TokenKind, ...] = tuple(TokenKind)
TARGET = "target"  # configured target URL (bounded by config)
REASON = "reason"  # bounded error reason token
SERVER = "server"  # which of the observer's HTTP servers: observer | proxy
STAT = "stat"  # mean | max
STATE = "state"  # replica engine state: unhealthy | asleep | hung


class EngineState(StrEnum):
    """A replica's engine state that is not plain serving (the `state` label of REPLICAS_IN_STATE)."""

    UNHEALTHY = "unhealthy"
    """An engine reports `engine_healthy` 0 (vLLM's fault tolerance)."""
    ASLEEP = "asleep"
    """Every engine sleeps (sleep mode): idle on purpose, not failing."""
    HUNG = "hung"
    """Requests running and none finished for `scrape.hung_after_seconds`: /health stays green."""


ENGINE_STATES: tuple[EngineState, ...] = tuple(EngineState)
GOLDEN_SET = "golden_set"
CHECK = "check"
FIELD = "field"  # drift field: prompts | outputs | <scalar feature>
CANARY = "canary"
BASELINE = "baseline"
METRIC = "metric"
ARM = "arm"  # canary | baseline (canary analysis), current | baseline (drift)
SOURCE = "source"  # proxy | ingest | otel
CLIENT = "client"  # an ingest client that reports its own drops: litellm | otel | other
REDACTION_KIND = "redaction_kind"
CODE = "code"  # HTTP status code of a proxied request (bounded: the codes HTTP defines)
TENANT = "tenant"  # bounded: allow-listed or among the top_n busiest (sampling.tenants), else other / none
WATCHED_CODES: tuple[str, ...] = ("429", "500", "502", "503", "504")
"""Status codes exported from 0 per version (shed, server errors, a client's own 502/504) by the sampling proxy
and the synthetic probe: rate() on a series born with the first failure sees it a scrape late."""
SEVERITY = "severity"
# Canary analysis and version inventory.
MAX_MODEL_LEN = "max_model_len"  # vLLM max model length (integer text)
PROMPT_TEMPLATE_HASH = "prompt_template_hash"  # from config, bounded by config
SAMPLING_DEFAULTS_HASH = "sampling_defaults_hash"  # from config, bounded by config
# --- Alert rules.
SLO = "slo"  # SLO name from slo.* config
SLI = "sli"  # latency | availability | quality
FINGERPRINT = "fingerprint"  # on VERSION_INFO: what a version actually serves
TOKENIZER = "tokenizer"  # 12 hex of the /tokenize probe's token ids, `mixed` (replicas disagree) or `unknown`
JOB = "job"  # periodic job name on JOB_* self-metrics; Prometheus' job on `up`
OUTCOME = "outcome"  # JOB_RUNS / JUDGE_CALLS outcome
IMAGE = "image"  # VERSION_MUTABLE_IMAGE: an image reference (at most 4 a version, 128 characters)
ACTION = "action"  # ROLLOUT_ACTIONS: promote | rollback
RESULT = "result"  # ROLLOUT_ACTIONS: written | conflict | forbidden | not_found | unreachable | http_error
SET_VERSION = "set_version"  # golden-set content hash (one per configured set)
JUDGE_MODEL = "judge_model"  # configured judge model name
JUDGE = "judge"  # the judge model of the reliability gauges (one per configured judge)
JUDGE_PROMPT_VERSION = "judge_prompt_version"  # version string of evals/judge_prompt.yaml
# --- Drift.
STATUS = "status"  # drift status: ok | insufficient_data | no_baseline | error
BASELINE_HASH = "baseline_hash"  # on DRIFT_BASELINE_INFO: sha256 of the active baseline
EMBEDDER = "embedder"  # on DRIFT_BASELINE_INFO: embedding model id
# --- Scraping self-metrics.
OBSERVER_VERSION = "observer_version"  # on BUILD_INFO
PYTHON_VERSION = "python_version"  # on BUILD_INFO

QUANTILES: tuple[float, ...] = (0.5, 0.95, 0.99)
FINISHED_REASONS: tuple[str, ...] = ("stop", "length", "abort", "error", "repetition")
"""Finished reasons vLLM emits (error from 0.13, repetition from 0.20). Others are folded into 'other'."""
# --- Observed fingerprints: hashes, never text (conventions.fingerprint).
TEMPLATE_HASH = "template_hash"  # 12 hex digits of the system prompt's hash; bounded by sampling.fingerprint.top_k
SAMPLING_HASH = "sampling_hash"  # 12 hex digits of the sampling parameters' hash
PART = "part"  # template | sampling (fingerprints); ttft | e2e (outside-engine time)
WINDOW = "window"  # current | reference (FINGERPRINT_SAMPLES)
REPLICA = "replica"  # a version's pod (or target host:port); bounded by the version's targets (pod cap)
HTTP_STATUS_CLASS = "status"  # on HTTP_RESPONSES: 2xx | 3xx | 4xx | 5xx | other (vLLM's instrumentator)

# Kubernetes pod label (not a Prometheus label): Argo's stable/canaryMetadata set it, discovery and the
# sidecar proxy read it.
POD_ROLE_LABEL = "observer.dev/role"
