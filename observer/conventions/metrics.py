"""Names of the observer's exported metric families (units in the names, no `_total` on the family name
where prometheus_client adds it; full sample names are given where PromQL uses them)."""

from __future__ import annotations

PREFIX = "observer_"

# --- Accumulated per-version histograms and counters (monotonic across pod restarts and reshuffles).
# Use these for PromQL rate()/histogram_quantile() in alerts, dashboards and Argo queries.
HIST_TTFT = "observer_ttft_seconds"
HIST_ITL = "observer_inter_token_latency_seconds"
HIST_E2E = "observer_e2e_latency_seconds"
HIST_QUEUE = "observer_queue_time_seconds"
HIST_TPOT = "observer_time_per_output_token_seconds"  # per request: decode time / (output tokens - 1)
HIST_ROUTER_TTFT = "observer_router_ttft_seconds"  # TTFT the router in front of vLLM measured (llm-d EPP, Dynamo)
ROUTER_REQUESTS = "observer_router_requests"  # counter {version, outcome=ok|error}: requests the router routed
ROUTER_QUEUED = "observer_router_queued_requests"  # gauge {version}: requests held at the router
ROUTER_SATURATED = "observer_router_saturated"  # gauge {version}: 1 when the router's pool is saturated or stale
REQUESTS = "observer_requests"  # counter; sample name observer_requests_total{finished_reason}
PROMPT_TOKENS = "observer_prompt_tokens"  # counter
GENERATION_TOKENS = "observer_generation_tokens"  # counter
PROMPT_TOKENS_COMPUTED = "observer_prompt_tokens_computed"  # counter: prefilled here (no cache hits, no transfers)
PREEMPTIONS = "observer_preemptions"  # counter
PREFIX_CACHE_QUERIES = "observer_prefix_cache_queries_tokens"  # counter
PREFIX_CACHE_HITS = "observer_prefix_cache_hits_tokens"  # counter

# --- Sliding-window signals per version (gauges computed by the observer over scrape.window_seconds).
WIN_TTFT = "observer_window_ttft_seconds"  # {quantile}
WIN_ITL = "observer_window_inter_token_latency_seconds"  # {quantile}
WIN_E2E = "observer_window_e2e_latency_seconds"  # {quantile}
WIN_QUEUE = "observer_window_queue_time_seconds"  # {quantile}
WIN_ROUTER_TTFT = "observer_window_router_ttft_seconds"  # {quantile}
WIN_REQUEST_RATE = "observer_window_requests_per_second"
WIN_PROMPT_TOKEN_RATE = "observer_window_prompt_tokens_per_second"
WIN_GENERATION_TOKEN_RATE = "observer_window_generation_tokens_per_second"
WIN_FINISHED_RATIO = "observer_window_finished_ratio"  # {finished_reason}
WIN_PREEMPTION_RATE = "observer_window_preemptions_per_second"
WIN_PREFIX_CACHE_HIT_RATIO = "observer_window_prefix_cache_hit_ratio"
QUEUE_DEPTH_PER_REPLICA = "observer_queue_depth_per_replica_requests"
RUNNING_REQUESTS = "observer_running_requests"
KV_CACHE_USAGE = "observer_kv_cache_usage_ratio"  # {stat=mean|max}
HTTP_RESPONSES = "observer_http_responses"  # counter {version,model,status}: vLLM generation responses by class
COLD_START = "observer_cold_start_seconds"  # histogram {version}: pod start → its first good scrape
GPU_CLOCK_THROTTLED = "observer_gpu_clock_throttled_gpus"  # {version,reason}: GPUs with that NVML reason now
CLOCK_THROTTLE_REASONS = {"sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40,
                          "hw_power_brake": 0x80}
"""NVML clock throttle (event) reason bits DCGM reports (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS); idle, application
clocks, sync boost and display clocks are not slowdowns and are left out."""
HARDWARE_SLOWDOWNS = ("hw_slowdown", "hw_thermal", "hw_power_brake")
REPLICAS = "observer_replicas"  # vLLM targets up per version
REPLICA_TTFT_P50 = "observer_replica_ttft_p50_seconds"  # {version,replica}: window TTFT median of one replica
REPLICA_TTFT_P95 = "observer_replica_ttft_p95_seconds"  # {version,replica}: window TTFT p95 of one replica
REPLICA_E2E_P95 = "observer_replica_e2e_latency_p95_seconds"  # {version,replica}: window e2e p95 of one replica
REPLICA_SHARE = "observer_replica_request_share_ratio"  # {version,replica}: share of the version's requests
REPLICA_OUTLIER_SCORE = "observer_replica_outlier_score"  # {version,replica}: robust z of its p95 vs siblings
REPLICA_OUTLIER = "observer_replica_outlier"  # {version,replica} 0/1 (analyse.replicas)

# --- GPU (DCGM joined to version), {stat=mean|max} where it applies.
GPU_UTIL = "observer_gpu_utilization_ratio"
GPU_FB_USED = "observer_gpu_framebuffer_used_ratio"
GPU_TEMP = "observer_gpu_temperature_celsius"
GPU_POWER = "observer_gpu_power_watts"
GPU_TENSOR_ACTIVE = "observer_gpu_tensor_active_ratio"
GPU_DRAM_ACTIVE = "observer_gpu_dram_active_ratio"
GPU_MEMORY_ERRORS = "observer_gpu_memory_errors"  # gauge {version, kind}: ECC / remapped rows (DCGM sums)
GPU_THROTTLE_SECONDS = "observer_gpu_throttle_seconds"  # counter {version, reason=power|thermal}
ENGINE_RESTARTS = "observer_engine_restarts"  # counter {version}: vLLM restarts seen as counter resets
REPLICAS_IN_STATE = "observer_replicas_in_state"  # gauge {version, state}: replicas up that are unhealthy|asleep|hung
SPEC_DECODE_TOKENS = "observer_spec_decode_tokens"  # counter {version, model, outcome=accepted|rejected}: draft tokens
CORRUPTED_REQUESTS = "observer_corrupted_requests"  # counter {version, model}: finished with NaNs in the logits
ADMISSION_REJECTIONS = "observer_admission_rejections"  # counter {version, reason}: vLLM's queue-limit 503s
GPU_XID_ERRORS = "observer_gpu_xid_errors"  # counter: XID events seen (changes of the last-XID gauge to non-zero)
# --- Cost and energy per version: running totals and window ratios.
COST = "observer_cost"  # counter {version}: currency units (cost.gpu_hour_prices / replica_hour_price)
REPLICA_SECONDS = "observer_replica_seconds"  # counter {version}: replicas up × seconds
GPU_SECONDS = "observer_gpu_seconds"  # counter {version, gpu_model}: attributed GPUs × seconds
UNPRICED_GPU_SECONDS = "observer_unpriced_gpu_seconds"  # counter {version, gpu_model}: GPUs with no price
ENERGY = "observer_energy_joules"  # counter {version}: DCGM energy (absent without power readings)
COST_PER_MILLION_TOKENS = "observer_cost_per_million_tokens"  # gauge {version, kind=prompt|generation|total}
COST_PER_THOUSAND_REQUESTS = "observer_cost_per_thousand_requests"  # gauge {version}
ENERGY_PER_TOKEN = "observer_energy_joules_per_token"  # gauge {version, kind=generation|total}
GPU_COUNT = "observer_gpus"

# --- Self-metrics of scraping.
TARGET_UP = "observer_target_up"  # {version,kind,target}
SCRAPE_DURATION = "observer_scrape_duration_seconds"  # {version,kind,target}
SCRAPE_ERRORS = "observer_scrape_errors"  # counter {version,kind,target,reason}
LAST_SUCCESS = "observer_last_successful_scrape_timestamp_seconds"  # {version,kind,target}
SCRAPE_CYCLES = "observer_scrape_cycles"  # counter
JOB_RUNS = "observer_job_runs"  # counter {job, outcome}
HTTP_REFUSED = "observer_http_refused"  # counter {server, reason}: connections refused before any route
JOB_LAST_SUCCESS = "observer_job_last_success_timestamp_seconds"  # {job}
BUILD_INFO = "observer_build_info"

# --- Sampling, ingest and store (issue: live output sampling).
SAMPLES_SEEN = "observer_samples_seen"  # counter {version,source}
SAMPLES_SAMPLED = "observer_samples_sampled"  # counter {version,source}
SAMPLES_STORED = "observer_samples_stored"  # counter {version}
SAMPLES_DROPPED = "observer_samples_dropped"  # counter {version,reason}
INGEST_CLIENT_DROPPED = "observer_ingest_client_dropped"  # counter {client,reason}: dropped before ingest
FEEDBACK_EVENTS = "observer_feedback_events"  # counter {version,kind,outcome}: users' events joined, stored
FEEDBACK_REJECTED = "observer_feedback_rejected"  # counter {reason}: events refused (FEEDBACK_REJECT_REASONS)
TENANT_REQUESTS = "observer_tenant_requests"  # counter {version,tenant,code}: bounded tenant label, status class
TENANT_TOKENS = "observer_tenant_tokens"  # counter {version,tenant,kind}: prompt | generation
TENANT_TTFT = "observer_tenant_ttft_seconds"  # histogram {version,tenant}
TENANT_OVERFLOW = "observer_tenant_overflow"  # counter {reason}: other | untrusted | too_long
REDACTIONS = "observer_redactions"  # counter {redaction_kind}
PROXY_ADDED_LATENCY = "observer_proxy_added_latency_seconds"  # histogram {version}
PROXY_TTFT = "observer_proxy_ttft_seconds"  # histogram {version} client-side
PROXY_E2E = "observer_proxy_e2e_latency_seconds"  # histogram {version} client-side
PROXY_REQUESTS = "observer_proxy_requests"  # counter {version, code}
PROXY_UNCAPPED = "observer_proxy_uncapped_requests"  # counter {version}: generation requests without max_tokens
WIN_PROMPT_NEAR_LIMIT = "observer_window_prompt_near_limit_ratio"  # {version}: prompts near max_model_len
PROMPT_NEAR_LIMIT_THRESHOLD = "observer_prompt_near_limit_threshold_tokens"  # {version}: what "near" means
PROBE_REQUESTS = "observer_probe_requests"  # counter {version, code}: the synthetic probe through the user route
PROBE_TTFT = "observer_probe_ttft_seconds"  # histogram {version}: the probe's time to first token
PROXY_SHADOW_REQUESTS = "observer_proxy_shadow_requests"  # counter {version, code}: shadow replays, kept apart
SAMPLE_QUEUE_DEPTH = "observer_sample_queue_depth"
CONVERSATION_KEYS = "observer_conversation_keys"  # counter {outcome}: conversation keys sources gave, what became
# Engine spans: vLLM's OTLP `llm_request` spans joined by trace id to the requests the proxy forwarded.
OTLP_EXPORTS = "observer_otlp_exports"  # counter {code}: OTLP/HTTP export requests received, by answer
OTLP_SPANS = "observer_otlp_spans"  # counter {outcome}: joined | unmatched | rejected | other
OTEL_GENAI_SPANS = "observer_otel_genai_spans"  # counter {outcome}: applications' GenAI spans, what became of them
EVALUATION_EVENTS = "observer_evaluation_events"  # counter {outcome}: gen_ai.evaluation.result events sent over OTLP
ENGINE_SPAN_REQUESTS = "observer_engine_span_requests"  # counter {version, outcome}: joined | missing | overflow
OUTSIDE_ENGINE = "observer_outside_engine_seconds"  # histogram {version, part}: proxy-seen minus engine-seen
STORE_BYTES = "observer_store_bytes"
STORE_ROWS = "observer_store_rows"  # {version}

# --- Quality (golden sets, rule checks, judge).
GOLDEN_PASS_RATIO = "observer_golden_pass_ratio"  # {version,golden_set}
GOLDEN_MEAN_SCORE = "observer_golden_mean_score"  # {version,golden_set}
GOLDEN_SCORED = "observer_golden_scored_items"  # gauge {version,golden_set} items in the last run
GOLDEN_ITEMS = "observer_golden_items"  # counter {version,golden_set}  (all scored items, SLO total)
GOLDEN_ITEMS_PASSED = "observer_golden_items_passed"  # counter {version,golden_set} (SLO good)
GOLDEN_JUDGE_ERRORS = "observer_golden_judge_errors"  # counter {version,golden_set}
GOLDEN_LAST_RUN = "observer_golden_last_run_timestamp_seconds"  # {version,golden_set}
LIVE_CHECKS = "observer_live_checks"  # counter {version,check}
LIVE_CHECK_FAILURES = "observer_live_check_failures"  # counter {version,check}
LIVE_CHECK_FAILURE_RATIO = "observer_live_check_failure_ratio"  # gauge {version,check}
JUDGE_CALLS = "observer_judge_calls"  # counter {outcome}
JUDGE_LAST_SUCCESS = "observer_judge_last_success_timestamp_seconds"
JUDGE_AGREEMENT_KAPPA = "observer_judge_agreement_kappa"  # gauge {judge}: κ vs the labelled anchors
JUDGE_AGREEMENT_ITEMS = "observer_judge_agreement_items"  # gauge {judge}: anchors judged (judge errors apart)
JUDGE_AGREEMENT_ERRORS = "observer_judge_agreement_errors"  # gauge {judge}: anchors the judge failed to answer
JUDGE_AGREEMENT_CHECKED = "observer_judge_agreement_checked_timestamp_seconds"  # gauge {judge}
JUDGE_USER_AGREEMENT_KAPPA = "observer_judge_user_agreement_kappa"  # gauge {judge}: κ vs users' feedback
JUDGE_USER_AGREEMENT_ANSWERS = "observer_judge_user_agreement_answers"  # gauge {judge}: answers both graded
JUDGE_POSITION_CONSISTENCY = "observer_judge_position_consistency"  # gauge {judge}: pairs whose orders agree
JUDGE_BUDGET_REMAINING = "observer_judge_budget_remaining"  # gauge {judge}: calls left in the sliding hour
JUDGE_BUDGET = "observer_judge_budget_per_hour"  # gauge {judge}
SHADOW_REPLAYS = "observer_shadow_replays"  # counter {version, outcome}
SHADOW_SKIPPED = "observer_shadow_skipped"  # counter {version, reason}: canary's prompts not replayed
SHADOW_PAIRS = "observer_shadow_pairs"  # counter {version, outcome}: canary's pairs by judge outcome
SHADOW_QUEUE = "observer_shadow_queue_depth"  # gauge
SHADOW_BUDGET_REMAINING = "observer_shadow_budget_remaining"  # gauge {version}: pairs left today
GOLDEN_UNSCORED = "observer_golden_unscored_items"  # counter {version,golden_set,reason}
GOLDEN_TTFT = "observer_golden_ttft_seconds"  # gauge {version,golden_set,quantile} client-side, last run
GOLDEN_LATENCY = "observer_golden_latency_seconds"  # gauge {version,golden_set,quantile} client-side, last run
GOLDEN_SET_INFO = "observer_golden_set_info"  # gauge 1 {golden_set,set_version,judge_model,judge_prompt_version}

# --- Drift.
DRIFT_STATISTIC = "observer_drift_statistic"  # {version,field}
DRIFT_P_VALUE = "observer_drift_p_value"  # {version,field}
DRIFT_DETECTED = "observer_drift_detected"  # {version,field} 0/1
DRIFT_SAMPLES = "observer_drift_samples"  # {version,field,arm}
DRIFT_BASELINE_INFO = "observer_drift_baseline_info"  # {model,baseline_hash,embedder}
DRIFT_LAST_CHECK = "observer_drift_last_check_timestamp_seconds"  # {version}
DRIFT_SHIFTED = "observer_drift_window_shifted"  # {version,field} 0/1: this window alone below alpha (ungated)
DRIFT_STREAK = "observer_drift_consecutive_shifted_windows"  # {version,field}
DRIFT_EFFECT_SIZE = "observer_drift_effect_size"  # {version,field} scalar features: KS D or Cramér's V
DRIFT_STATUS = "observer_drift_status"  # {version,field,status} 1 for the current status
DRIFT_RELATIVE_EFFECT = "observer_drift_relative_effect"  # {version,field}: statistic ÷ the baseline's own spread
DRIFT_NEEDED = "observer_drift_persistence_windows"  # {version}: shifted windows in a row that flag drift
DRIFT_BASELINE_FALSE_ALARM = "observer_drift_baseline_false_alarm_ratio"  # {version,field}: its own windows flagged
DRIFT_CHECK_ERRORS = "observer_drift_check_errors"  # counter {version,reason}
DRIFT_EMBED_CACHE_ENTRIES = "observer_drift_embedding_cache_entries"  # gauge: cached vectors

# --- Canary analysis and inventory.
CANARY_VERDICT = "observer_canary_verdict"  # {canary,baseline}: 1 pass, 0 inconclusive/nodata, -1 fail
CANARY_SCORE = "observer_canary_score"  # {canary,baseline} 0..100
CANARY_METRIC_RESULT = "observer_canary_metric_result"  # {canary,baseline,metric}: 1/0/-1
CANARY_SAMPLES = "observer_canary_samples"  # {canary,baseline,arm}
CANARY_CRITICAL_FAILED = "observer_canary_critical_failed"  # {canary,baseline} 0/1
CANARY_UNDECIDED = "observer_canary_undecided_seconds"  # {canary,baseline}: undecided this long (canary.end)
CANARY_LAST_EVALUATED = "observer_canary_last_evaluated_timestamp_seconds"  # {canary,baseline}
VERSION_INFO = "observer_version_info"  # {version,model,fingerprint,...}
REPLICA_TOKENIZER = "observer_replica_tokenizer_info"  # {version,model,replica,tokenizer}: /tokenize probe hash
# {version,gpu_model,gpu_driver,engine_args}: the canary's same-environment facts, for fleet mode
VERSION_ENVIRONMENT = "observer_version_environment_info"
FINGERPRINT_SHARE = "observer_fingerprint_observed_ratio"  # {version,template_hash,sampling_hash}: share, top-k
FINGERPRINT_SAMPLES = "observer_fingerprint_samples"  # {version,window}: samples with a fingerprint per window
FINGERPRINT_CHANGED = "observer_fingerprint_changed"  # {version,part} 0/1: current ≠ reference window
FINGERPRINT_MISMATCH = "observer_fingerprint_declared_mismatch"  # {version,part} 0/1: observed ≠ declared
CANARY_EVALUATIONS = "observer_canary_evaluations"  # counter {canary,baseline,outcome}: judge runs by verdict/error
CANARY_SOURCE_ERRORS = "observer_canary_source_errors"  # counter {canary,baseline}: data source unreachable

# --- Alert rules: recording-rule names, rule groups and alert names.
RULE_SLI_ERROR_RATIO = "observer_slo:sli_error:ratio_rate"  # + window, e.g. ..._rate5m {slo,sli,version}
RULE_SLO_OBJECTIVE = "observer_slo:objective:ratio"  # {slo,sli}
RULE_GROUP_SLO = "observer-slo-"  # + SLO name: recordings then burn-rate alerts
RULE_GROUP_ABSENT = "observer-sli-absent"
RULE_GROUP_LEADING = "observer-leading-indicators"
RULE_GROUP_SELF = "observer-self-health"
RULE_GROUP_HYGIENE = "observer-rollout-hygiene"
ALERT_BURN_PAGE = "ObserverSLOBurnRatePage"
ALERT_BURN_TICKET = "ObserverSLOBurnRateTicket"
ALERT_SLI_ABSENT = "ObserverSLIAbsent"
ALERT_CANARY_UNDECIDED = "ObserverCanaryUndecided"
ALERT_QUEUE_DEPTH = "ObserverQueueDepthHigh"
ALERT_KV_CACHE = "ObserverKVCacheNearlyFull"
ALERT_GPU_FRAMEBUFFER = "ObserverGPUFramebufferNearlyFull"
ALERT_GPU_XID = "ObserverGPUXidErrors"
ALERT_PREEMPTIONS = "ObserverPreemptionsRising"
ALERT_TARGET_DOWN = "ObserverTargetDown"
ALERT_OBSERVER_DOWN = "ObserverDown"
ALERT_SIGNALS_STALE = "ObserverSignalsStale"
ALERT_JOB_FAILING = "ObserverJobFailing"
ALERT_JUDGE_NOT_RUNNING = "ObserverJudgeNotRunning"
ALERT_JUDGE_AGREEMENT = "ObserverJudgeAgreementLow"
ALERT_DRIFT_DETECTED = "ObserverDriftDetected"
ALERT_LOAD_SHEDDING = "ObserverLoadShedding"
ALERT_GPU_MEMORY_ERRORS = "ObserverGPUMemoryErrors"
ALERT_GPU_THROTTLED = "ObserverGPUThrottled"
ALERT_GPU_HW_SLOWDOWN = "ObserverGPUHardwareSlowdown"
ALERT_RESTART_STORM = "ObserverRestartStorm"
ALERT_ENGINE_HUNG = "ObserverEngineHung"
ALERT_CORRUPTED_OUTPUTS = "ObserverCorruptedOutputs"
ALERT_ENGINE_SPANS_MISSING = "ObserverEngineSpansMissing"
ALERT_REPLICA_OUTLIER = "ObserverReplicaSlow"
ALERT_PROBE_FAILING = "ObserverProbeFailing"
SLO_THRESHOLD_EXPOSED = "observer_slo_threshold_exposed"  # gauge {slo, version}: the threshold is a scraped edge
ALERT_GOLDEN_NOT_RUN = "ObserverGoldenSetNotRun"
ALERT_DRIFT_NOT_RUN = "ObserverDriftCheckNotRun"
ALERT_VERDICT_STALE = "ObserverCanaryVerdictStale"
ALERT_CANARY_FAILED = "ObserverCanaryFailed"
ALERT_FINGERPRINTS = "ObserverVersionMultipleFingerprints"
ALERT_FINGERPRINT_CHANGED = "ObserverFingerprintChanged"
ALERT_FINGERPRINT_MISMATCH = "ObserverFingerprintMismatch"
ALERT_RETIRED_TRAFFIC = "ObserverRetiredVersionTraffic"

# --- Dashboards: accumulated per-version histograms the dashboards need for parity with vLLM's
# example dashboard ({version,model,le}); exported by the scrape runtime from the vLLM families of the same
# meaning (request_prefill_time_seconds, request_decode_time_seconds, request_prompt_tokens,
# request_generation_tokens, request_max_num_generation_tokens).
HIST_PREFILL = "observer_prefill_time_seconds"
HIST_DECODE = "observer_decode_time_seconds"
HIST_PROMPT_LENGTH = "observer_request_prompt_tokens"
HIST_GENERATION_LENGTH = "observer_request_generation_tokens"
HIST_MAX_GENERATION_TOKENS = "observer_request_max_generation_tokens"

# --- Kubernetes discovery ---------------------------------------------------------------
VERSION_ROLE = "observer_version_role"  # {version, group, role} = 1: the role each watched version has now
DISCOVERY_SYNCED = "observer_discovery_synced"  # {resource}: 1 once listed, 0 before
DISCOVERY_ERRORS = "observer_discovery_errors"  # counter {resource, reason}
DISCOVERY_RELISTS = "observer_discovery_relists"  # counter {resource, reason}: start, gone, resync, error
DISCOVERY_EVENTS = "observer_discovery_events"  # counter {resource, type}
DISCOVERY_PROBLEMS = "observer_discovery_problems"  # counter {group, problem}: pods, objects, versions skipped and why
DISCOVERY_PODS = "observer_discovery_pods"  # {version, group, role}: serving pods counted
VERSION_NODES = "observer_version_nodes"  # {version, group}: distinct nodes its serving pods run on
VERSION_MUTABLE_IMAGE = "observer_version_mutable_image"  # {version, group, image}: serving pods on a :latest image
VERSION_PODS = "observer_version_pods"  # {version, group, state, reason}: pods by state (ready, unschedulable, ...)
ROLLOUT_CANARY_WEIGHT = "observer_rollout_canary_weight_ratio"  # {group}: canary's expected share (its source)
ROLLOUT_CANARY_REPLICA_SHARE = "observer_rollout_canary_replica_share_ratio"  # {group}: canary pods share
ROLLOUT_STALE_REVISION_PODS = "observer_rollout_stale_revision_pods"  # {group}: pods neither stable nor canary
ROLLOUT_AUTOSCALER_CONFLICT = "observer_rollout_autoscaler_conflict"  # {group, autoscaler}: HPA/KEDA aims past
AUTOSCALER_REPLICAS = "observer_autoscaler_replicas"  # {group, autoscaler, kind=min|max|current|desired}
AUTOSCALER_SIGNAL = "observer_autoscaler_signal"  # {group, autoscaler, signal} = 1: what the autoscaler scales on
AUTOSCALER_SCALE_DOWN_WAIT = "observer_autoscaler_scale_down_stabilization_seconds"  # {group, autoscaler}
ROLLOUT_ACTIONS = "observer_rollout_actions"  # counter {group, action, result}: actor mode's writes on the source
ROLLBACK_WINDOW_PODS = "observer_rollout_rollback_window_pods"  # {group, version}: previous stable's pods, in window
ROLLBACK_WINDOW_REMAINING = "observer_rollout_rollback_window_remaining_seconds"  # {group}: of scaleDownDelaySeconds
GROUP = "group"
RESOURCE = "resource"
PROBLEM = "problem"
ROLE = "role"
SIGNAL = "signal"
ALERT_REPLICA_SHARE = "ObserverCanaryReplicasOffWeight"
ALERT_STALE_REVISION = "ObserverOldRevisionStillServing"
ALERT_AUTOSCALER_CONFLICT = "ObserverAutoscalerTargetsRolloutReplicaSet"
ALERT_AUTOSCALER_CEILING = "ObserverAutoscalerAtCeiling"
ALERT_AUTOSCALER_FLAPPING = "ObserverAutoscalerFlapping"
ALERT_NOISY_NEIGHBOUR = "ObserverNoisyNeighbour"
ALERT_AUTOSCALER_NOT_REACTING = "ObserverAutoscalerNotReacting"
ALERT_AUTOSCALER_COLD_START = "ObserverAutoscalerColdStartRisk"
ALERT_PODS_NOT_ARRIVING = "ObserverPodsNotArriving"
ALERT_ROLLBACK_WINDOW_LOST = "ObserverRollbackWindowLost"
ALERT_VERSION_ON_ONE_NODE = "ObserverVersionOnOneNode"
ALERT_MUTABLE_IMAGE = "ObserverMutableImageTag"
ALERT_PATH_TTFT = "ObserverPathTTFTHigh"
ALERT_PROMPTS_NEAR_LIMIT = "ObserverPromptsNearContextLimit"
ALERT_UNCAPPED = "ObserverRequestsWithoutMaxTokens"
ALERT_TAIL_RATIO = "ObserverTTFTTailRatioHigh"
ALERT_TOKENIZER_MISMATCH = "ObserverReplicasTokenizeDifferently"
ALERT_DISCOVERY_FAILING = "ObserverDiscoveryFailing"
ALERT_COST_OVER_BUDGET = "ObserverCostPerTokenOverBudget"
ALERT_COST_REGRESSION = "ObserverCostPerTokenRegression"
RULE_GROUP_COST = "observer-cost"
RULE_COST_PER_MTOK = "observer:cost_per_million_generation_tokens:"  # + window, e.g. rate1h
RULE_ENERGY_PER_TOKEN = "observer:energy_joules_per_generation_token:"  # + window

# --- Fleet scale ---------------------------------------------------------------------------
LEADER = "observer_leader"  # 1 on the replica that runs the singleton jobs, 0 on the others (shared store only)
WORK_ITEMS = "observer_work_items"  # gauge {kind, state}: jobs in the shared work queue
WORK_ATTEMPTS = "observer_work_attempts"  # counter {kind, outcome}: this replica's finished job attempts
WORK_ENQUEUED = "observer_work_enqueued"  # counter {kind, outcome}: jobs offered (added, duplicate, dropped)

ALERT_NAMES: tuple[str, ...] = tuple(v for k, v in sorted(globals().items()) if k.startswith("ALERT_")
                                     and isinstance(v, str))
"""Every alert name the renderer may generate (slo.alert_severity keys are checked against it)."""
