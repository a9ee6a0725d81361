"""Behaviour profiles of a simulated vLLM version: latency, errors, answer quality, load, GPU faults.

A profile is plain data (style rule 4): presets are dicts of overrides on the defaults, and a live
change (`PUT /sim/profile`, `FleetHandle.set_profile`) is validated the same way as a preset.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from observer.errors import ConfigError


class Profile(BaseModel):
    """How one simulated version behaves. Latencies are simulated seconds (what /metrics reports)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    load_rps: float = Field(4.0, ge=0, le=500, description="Built-in background requests per second.")
    ttft_median_s: float = Field(0.12, gt=0, description="Median time to first token at ttft_scale 1.")
    ttft_scale: float = Field(1.0, gt=0, le=1000, description="Multiplier on TTFT and queue time.")
    queue_median_s: float = Field(0.01, ge=0, description="Median time waiting in the queue.")
    itl_median_s: float = Field(0.025, gt=0, description="Median inter-token latency at itl_scale 1.")
    itl_scale: float = Field(1.0, gt=0, le=1000, description="Multiplier on inter-token latency.")
    prompt_tokens_median: int = Field(350, ge=1, le=100_000, description="Median prompt length (load).")
    output_tokens_median: int = Field(150, ge=1, le=100_000, description="Median output length (load).")
    max_tokens: int = Field(512, ge=1, le=100_000, description="max_tokens of the built-in load.")
    error_rate: float = Field(0.0, ge=0, le=1, description="Share of requests that fail (HTTP 500).")
    shed_rate: float = Field(0.0, ge=0, le=1, description="Share of API requests refused with 503 before the "
                                                           "engine (admission control / an overloaded server).")
    legacy_errors: bool = Field(False, description="As vLLM < 0.13: failed requests have no `error` finish reason, "
                                                   "they show only as HTTP 5xx in http_requests_total.")
    admission_reject_rate: float = Field(
        0.0, ge=0, le=1, description="Share of requests vLLM refuses at admission (a queue limit): answered 503, "
                                     "counted in admission_rejections_total, in no finished count.")
    asleep: bool = Field(False, description="Sleep mode (POST /sleep): the engine serves nothing and reports "
                                            "engine_sleep_state{sleep_state=\"awake\"} 0.")
    hung: bool = Field(False, description="The engine loop is stuck: requests keep arriving and running, none "
                                          "finishes; /health and /metrics still answer.")
    engine_healthy: bool | None = Field(
        None, description="Expose vllm:engine_healthy (vLLM's fault tolerance, main after 0.33) with this value; "
                          "None: the family is absent, as without --enable-fault-tolerance.")
    spec_decode_acceptance: float | None = Field(
        None, ge=0, le=1, description="Speculative decoding on, with this share of draft tokens accepted (a draft "
                                      "model's quality): exposes spec_decode_num_draft_tokens and _accepted_tokens. "
                                      "None: speculation off, as by default in vLLM.")
    corrupted_rate: float | None = Field(
        None, ge=0, le=1, description="vLLM checks logits for NaNs (VLLM_COMPUTE_NANS_IN_LOGITS=1) and this share "
                                      "of finished requests has them: exposes vllm:corrupted_requests. None: the "
                                      "family is absent, as by default.")
    router_queue_s: float = Field(0.0, ge=0, le=600, description="Seconds each request waits at the router (llm-d "
                                                               "EPP flow control, Dynamo's HTTP queue) before the "
                                                               "engine: in the router's TTFT only.")
    router_saturation: float = Field(0.4, ge=0, le=10, description="The pool saturation llm-d's EPP reports while "
                                                                   "this version is routed (≥ 1: saturated).")
    router_stale_endpoints: int = Field(0, ge=0, le=1000, description="Endpoints whose metrics the EPP sees as stale.")
    abort_rate: float = Field(0.005, ge=0, le=1, description="Share of load requests aborted by clients.")
    engine_version: str = Field("0.33.0", min_length=1, max_length=40,
                                description="The vLLM release /version answers (an engine upgrade is another).")
    preemption_rate: float = Field(0.0, ge=0, le=1, description="Share of requests preempted once.")
    prefix_cache_hit_ratio: float = Field(0.3, ge=0, le=1, description="Share of prompt tokens cached.")
    accuracy: float = Field(0.9, ge=0, le=1, description="Chance a golden-set prompt gets its reference.")
    refusal_rate: float = Field(0.02, ge=0, le=1, description="Chance an answer is a refusal.")
    drift_fraction: float = Field(0.0, ge=0, le=1, description="Share of load prompts from another domain.")
    kv_capacity_tokens: int = Field(60_000, ge=1, description="KV-cache size in tokens (for the gauge).")
    xid: int = Field(0, ge=0, description="Last XID error the GPU reports (0: none; 79: fell off the bus).")
    gpus_per_replica: int = Field(1, ge=1, le=8, description="GPUs each replica holds (tensor parallel): all are "
                                                             "busy together, all are billed (DCGM shows each).")
    gpu_idle_watts: float = Field(68.0, ge=0, le=2000, description="Power of an idle GPU.")
    gpu_ecc_dbe: int = Field(0, ge=0, description="Uncorrectable (double-bit) ECC errors the GPU reports.")
    gpu_thermal_throttle: float = Field(0.0, ge=0, le=1, description="Share of time the GPU is thermally "
                                                                     "throttled (its violation counter grows).")
    gpu_joules_per_token: float | None = Field(
        None, ge=0, le=100, description="Energy per processed token (prompt + generated), shared by the replica's "
                                        "GPUs, on top of idle power. None: power follows utilisation only.")
    time_scale: float = Field(1.0, ge=0, le=10, description="Real seconds slept per simulated second (API).")
    chat_template: str = Field("default", max_length=64, description="The server-side chat template's name: "
                               "/tokenize applies it, so a replica with another template returns other token ids.")
    tokenize: bool = Field(True, description="Serves /tokenize (vLLM < 0.5 and other servers do not: 404).")


PRESETS: Mapping[str, Mapping[str, Any]] = {
    "healthy": {},
    "slow": {"ttft_scale": 1.5},
    "flaky": {"error_rate": 0.03},
    "worse": {"accuracy": 0.6, "refusal_rate": 0.10},
    "drifted": {"drift_fraction": 0.10},
    "idle": {"load_rps": 0.0},
}
"""Named starting points; a profile is a preset plus overrides."""

OPERATIONAL = ("load_rps", "time_scale")
"""Fields a preset applied on top of a running profile leaves alone unless the preset sets them."""


def build_profile(spec: str | Mapping[str, Any] | Profile | None = None, *, base: Profile | None = None
                  ) -> Profile:
    """Make a Profile from a preset name, a mapping of overrides (optionally with `preset`), or a Profile."""
    if isinstance(spec, Profile):
        return spec
    if spec is None:
        return base or Profile()
    if isinstance(spec, str):
        spec = {"preset": spec}
    changes = dict(spec)
    start: dict[str, Any] = base.model_dump(exclude_unset=True) if base is not None else {}
    preset = changes.pop("preset", None)
    if preset is not None:
        if preset not in PRESETS:
            raise ConfigError(f"unknown simulator preset {preset!r}; choose one of {', '.join(PRESETS)}",
                              path="preset", source="simulator profile")
        # A preset changes behaviour; the traffic volume and the time scale stay as they were.
        kept = {k: v for k, v in start.items() if k in OPERATIONAL}
        start = {**kept, **PRESETS[preset]}
    try:
        return Profile.model_validate({**start, **changes})
    except ValidationError as e:
        err = e.errors()[0]
        path = ".".join(str(p) for p in err["loc"])
        msg = f"unknown profile key {path!r}" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(msg, path=path, source="simulator profile") from e


def parse_profile_args(args: Sequence[str]) -> dict[str, Profile]:
    """Parse CLI `VERSION=PRESET[,key=value...]` arguments into profiles per version."""
    out: dict[str, Profile] = {}
    for arg in args:
        version, sep, rest = arg.partition("=")
        if not sep or not version or not rest:
            raise ConfigError(f"--profile {arg!r}: expected VERSION=PRESET[,key=value...]", source="command line")
        parts = rest.split(",")
        changes: dict[str, Any] = {}
        if "=" not in parts[0]:
            changes["preset"] = parts.pop(0)
        for part in parts:
            key, eq, value = part.partition("=")
            if not eq:
                raise ConfigError(f"--profile {arg!r}: {part!r} is not key=value", source="command line")
            changes[key.strip()] = _scalar(value.strip())
        out[version] = build_profile(changes)
    return out


def _scalar(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text
