"""The input vocabulary of routers in front of vLLM: llm-d's endpoint picker (EPP) and NVIDIA Dynamo's frontend.

A canary behind a router is seen best from it: its TTFT includes the time a request waited at the gateway, which
the engine never sees. Names as the upstream code registers them:

* llm-d EPP (`llm-d/llm-d-router`, pkg/epp/metrics/llm_d_router_metrics.go and metrics.go at ebab687): the
  `llm_d_epp_` families, with the deprecated `inference_objective_`, `inference_pool_` and `inference_extension_`
  names still written alongside for the families that existed before the rename (TTFT has only the new name).
  Per-request families carry `model_name` (what the client asked for) and `target_model_name` (what the EPP
  routed it to: a canary model or LoRA adapter); the flow-control gauges describe the whole pool.
* Dynamo frontend (`ai-dynamo/dynamo`, lib/llm/src/http/service/metrics.rs at 0014908): `dynamo_frontend_`
  families with a `model` label.
"""

from __future__ import annotations

from enum import StrEnum


class RouterKind(StrEnum):
    """Which router a target is."""

    LLMD_EPP = "llm-d-epp"
    DYNAMO = "dynamo"


# Parsed keys (what the store keeps per version, like vLLM's family keys).
TTFT = "router_ttft_seconds"
REQUESTS = "router_requests"  # labelled by outcome: ok | error
QUEUED = "router_queued_requests"  # gauge: requests waiting at the router before any engine

LLMD_PREFIX = "llm_d_epp_"
LLMD_TTFT = "llm_d_epp_request_ttft_seconds"
LLMD_REQUESTS = ("llm_d_epp_request_total", "inference_objective_request_total")
LLMD_ERRORS = ("llm_d_epp_request_error_total", "inference_objective_request_error_total")
LLMD_SATURATION = ("llm_d_epp_flow_control_pool_saturation", "inference_extension_flow_control_pool_saturation")
LLMD_STALE = ("llm_d_epp_flow_control_stale_endpoints",)
LLMD_QUEUE = ("llm_d_epp_flow_control_queue_size", "inference_extension_flow_control_queue_size")
"""Each tuple: today's name first, then the deprecated one it replaces; when both are exposed only the first is
read (the EPP writes both with the same values during the deprecation: counting both would double every count)."""
LLMD_MODEL_LABELS = ("target_model_name", "model_name")
"""The label that names the version, in order of preference: the routed-to model, else the requested one."""
AS_FINISHED = {"ok": "stop", "error": "error"}
"""Router outcomes as vLLM finished reasons: the requests of a version vLLM counts under another model name (a
LoRA adapter: vLLM labels its series with the base model) are the router's, by outcome."""
SATURATED_AT = 1.0
"""llm-d's pool saturation set point: at or above it flow control holds requests back (stage `effective`)."""

DYNAMO_TTFT = "dynamo_frontend_time_to_first_token_seconds"
DYNAMO_REQUESTS = "dynamo_frontend_requests_total"
DYNAMO_QUEUED = "dynamo_frontend_queued_requests"
DYNAMO_MODEL_LABEL = "model"

MAPPED: dict[str, str] = {
    LLMD_TTFT: "router TTFT per target model (the canary's router_ttft latency metric)",
    LLMD_REQUESTS[0]: "router requests per target model", LLMD_REQUESTS[1]: "deprecated twin of the above",
    LLMD_ERRORS[0]: "router errors per target model", LLMD_ERRORS[1]: "deprecated twin of the above",
    LLMD_SATURATION[0]: "pool saturated (≥ 1) in the window: the verdict is inconclusive",
    LLMD_SATURATION[1]: "deprecated twin of the above",
    LLMD_STALE[0]: "endpoints with stale metrics in the window: the verdict is inconclusive",
    LLMD_QUEUE[0]: "requests held by flow control, per target model", LLMD_QUEUE[1]: "deprecated twin of the above",
    DYNAMO_TTFT: "router TTFT per model (the canary's router_ttft latency metric)",
    DYNAMO_REQUESTS: "router requests per model, by status",
    DYNAMO_QUEUED: "requests queued at the frontend: the verdict is inconclusive while they wait",
}
"""Every router family the observer reads and where it goes; the others are not read (counted as seen)."""
