"""The *input* vocabulary: vLLM's latency families, their ids, default bucket edges and `le` label text.

One place for what the observer reads (the output names live in `metrics` and `labels`): the canary's
latency metrics, the SLO config, the exporter, the simulator and the Argo/alert renderers all use these.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client.utils import floatToGoString

LatencyId = Literal["ttft", "itl", "e2e", "queue"]
LATENCY_IDS: tuple[LatencyId, ...] = ("ttft", "itl", "e2e", "queue")

# The SLO section has always spelled inter-token latency `inter_token`; it is the same family as `itl`.
SLO_ALIASES: dict[str, LatencyId] = {"inter_token": "itl"}

# Parsed vLLM family keys (observer.collect.vllm strips the `vllm:`/`vllm_` prefix and `_bucket`).
FAMILY: dict[LatencyId, str] = {
    "ttft": "time_to_first_token_seconds",
    "itl": "inter_token_latency_seconds",
    "e2e": "e2e_request_latency_seconds",
    "queue": "request_queue_time_seconds",
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
DEFAULT_EDGES: dict[LatencyId, tuple[float, ...]] = {
    "ttft": TTFT_EDGES, "itl": ITL_EDGES, "e2e": REQUEST_EDGES, "queue": REQUEST_EDGES,
}


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
