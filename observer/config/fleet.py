"""Fleet, scraping, server and telemetry sections: what the observer watches and how it serves."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AnyHttpUrl, Field, field_validator, model_validator

from observer.config.base import Spec

VERSION_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

Url = Annotated[str, AnyHttpUrl]


def _check_url(value: str) -> str:
    AnyHttpUrl(value)  # raises a ValidationError naming the bad URL
    return value


class PodRef(Spec):
    """A Kubernetes pod serving a version; used to join DCGM GPU series to the version."""

    namespace: str = Field(description="Namespace of the vLLM pod.")
    pod: str = Field(description="Pod name (exact) of the vLLM pod.")
    started_at: float | None = Field(None, description="Unix time the pod started (set by Kubernetes discovery "
                                                       "from status.startTime; for the cold-start time).")


class RouterRef(Spec):
    """The router in front of a version, read per routed model (observer.collect.routers)."""

    kind: Literal["llm-d-epp", "dynamo"] = Field(description="llm-d-epp: llm-d's endpoint picker (`llm_d_epp_*`); "
                                                             "dynamo: NVIDIA Dynamo's frontend (`dynamo_frontend_*`).")
    urls: list[str] = Field(min_length=1, description="The router's /metrics URLs (a router in front of several "
                                                      "versions is listed on each; it is scraped once).")
    model: str | None = Field(None, description="The model name the router routes this version under: llm-d's "
                                                "`target_model_name` (a model or LoRA adapter), Dynamo's `model`. "
                                                "Default: the version's `model`.")

    @field_validator("urls")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return [_check_url(u) for u in v]


class VersionSpec(Spec):
    """One model version of the fleet (stable, canary, ...)."""

    name: str = Field(description="Version name; becomes the bounded `version` label. [a-z0-9-], ≤ 63.")
    role: Literal["stable", "canary", "other"] = Field("other", description="Role in canary analysis.")
    model: str | None = Field(None, description="Served model name; default: read from vLLM `model_name`.")
    vllm: list[str] = Field(default_factory=list, description="vLLM /metrics URLs, one per replica.")
    openai: str | None = Field(None, description="OpenAI-compatible base URL (…/v1) of this version.")
    dcgm: list[str] = Field(default_factory=list, description="DCGM-exporter /metrics URLs.")
    pods: list[PodRef] = Field(
        default_factory=list,
        description="Pods of this version for the DCGM join; empty: every GPU of its dcgm targets counts.",
    )
    prompt_template_hash: str | None = Field(None, description="Hash of the prompt template deployed.")
    sampling_defaults_hash: str | None = Field(None, description="Hash of the sampling defaults deployed.")
    expected_traffic_weight: float | None = Field(
        None, ge=0, le=1, description="Expected share of traffic (canary split sanity check)."
    )
    retired: bool = Field(False, description="A retired version must receive no traffic (hygiene alert).")
    group: str | None = Field(None, description="The model (discovery) this version belongs to: canaries are "
                                                "paired with the stable version of their own group.")
    router: RouterRef | None = Field(None, description="The router in front of this version (llm-d EPP, Dynamo): "
                                                       "its TTFT (gateway queueing included) and pool state.")
    pods_waiting: dict[str, int] = Field(
        default_factory=dict,
        description="Pods of this version that do not serve yet, by `state` or `state:reason` (set by Kubernetes "
                    "discovery: `unschedulable:insufficient_gpu`, `starting`, `failing:crashloop`, `not_ready`). "
                    "A canary waiting for pods is never passed.")
    images: list[str] = Field(
        default_factory=list,
        description="The images this version's pods run, by digest where the kubelet reports one "
                    "(`repo@sha256:…`), else as the pod names them (set by Kubernetes discovery, at most 4): part "
                    "of the version's fingerprint, so a rebuilt engine under the same tag is another identity.")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not VERSION_NAME.match(v):
            raise ValueError(f"version name {v!r} must match {VERSION_NAME.pattern}")
        return v

    @field_validator("vllm", "dcgm")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return [_check_url(u) for u in v]

    @field_validator("openai")
    @classmethod
    def _openai(cls, v: str | None) -> str | None:
        return None if v is None else _check_url(v)

    @model_validator(mode="after")
    def _router_model(self) -> VersionSpec:
        if self.router is not None and not (self.router.model or self.model):
            raise ValueError(f"version {self.name!r}: router needs the model name it routes this version under "
                             f"(router.model, or the version's model)")
        return self

    @property
    def router_model(self) -> str | None:
        """The model name the router's series carry for this version."""
        return None if self.router is None else (self.router.model or self.model)


class FleetSpec(Spec):
    """The versions being watched."""

    versions: list[VersionSpec] = Field(default_factory=list, description="Model versions of the fleet.")

    @field_validator("versions")
    @classmethod
    def _unique(cls, versions: list[VersionSpec]) -> list[VersionSpec]:
        seen: set[str] = set()
        for i, v in enumerate(versions):
            if v.name in seen:
                raise ValueError(f"duplicate version name {v.name!r} (entry {i})")
            seen.add(v.name)
        return versions

    def version(self, name: str) -> VersionSpec:
        """Return the version called `name`; KeyError if unknown."""
        for v in self.versions:
            if v.name == name:
                return v
        raise KeyError(name)


class ScrapeSpec(Spec):
    """How targets are scraped and how signals are windowed."""

    interval_seconds: float = Field(15.0, gt=0, le=3600, description="Seconds between scrape cycles.")
    timeout_seconds: float = Field(5.0, gt=0, le=120, description="Per-target scrape timeout.")
    max_body_bytes: int = Field(16 * 1024 * 1024, gt=1024, description="Larger bodies are refused.")
    window_seconds: float = Field(300.0, gt=0, description="Sliding window for per-version signals.")
    concurrency: int = Field(32, ge=1, le=1024, description="Most targets scraped at once.")
    max_samples_per_target: int = Field(
        100_000, ge=100, le=10_000_000,
        description="Most samples one target may expose (like Prometheus' sample_limit); more: the scrape "
                    "fails with reason sample_limit, parsing stops there and the last good data is kept.")
    max_models_per_target: int = Field(
        32, ge=1, le=10_000,
        description="Most model_name values one vLLM target may report (each becomes a label value).")
    hung_after_seconds: float = Field(
        300.0, gt=0, le=86_400,
        description="A replica with requests running and none finished for this long is hung (its /health may "
                    "stay green): counted in observer_replicas_in_state{state=\"hung\"}, the canary verdict is "
                    "never pass, ObserverEngineHung fires.")

    @model_validator(mode="after")
    def _timeout(self) -> ScrapeSpec:
        if self.timeout_seconds > self.interval_seconds:
            raise ValueError("timeout_seconds must not exceed interval_seconds")
        return self


class AuthSpec(Spec):
    """How the private routes (sample ingest and read-back, drift reports) are protected."""

    mode: Literal["token", "none"] = Field(
        "token", description="token: a bearer token is required (with none configured, private routes answer "
                             "503); none: served to anyone, logged loudly at start — loopback demos only.")


class ServerSpec(Spec):
    """The observer's own HTTP server."""

    host: str = Field("127.0.0.1", description="Listen address.")
    port: int = Field(9464, ge=0, le=65535, description="Listen port.")
    auth_token: str | None = Field(
        None, description="Bearer token for ingest/admin endpoints (env OBSERVER_AUTH_TOKEN wins)."
    )
    auth: AuthSpec = Field(default_factory=AuthSpec)
    max_request_bytes: int = Field(4 * 1024 * 1024, gt=0, description="Largest accepted request body.")
    max_connections: int = Field(1000, ge=1, le=100_000,
                                 description="Open client connections; one more is answered 503 and closed.")
    header_timeout_seconds: float = Field(10.0, gt=0, le=600,
                                          description="Time a client has to send a request's head (slowloris).")
    max_header_bytes: int = Field(64 * 1024, ge=1024, le=16 * 1024 * 1024,
                                  description="Largest request head (line + headers); larger: 431.")
    max_headers: int = Field(100, ge=8, le=10_000, description="Most headers in a request; more: 431.")


class EvaluationEventsSpec(Spec):
    """Scores and verdicts as OpenTelemetry GenAI `gen_ai.evaluation.result` events, sent over OTLP/HTTP."""

    enabled: bool = Field(False, description="Emit evaluation events (off by default).")
    endpoint: str | None = Field(None, description="OTLP/HTTP logs endpoint, e.g. http://collector:4318/v1/logs "
                                                   "(required when enabled).")
    headers: dict[str, str] = Field(default_factory=dict, description="Headers on every export (auth).")
    sample_rate: float = Field(1.0, ge=0, le=1, description="Share of per-item scores (golden items) sent; "
                                                            "canary verdicts are always sent.")
    queue_size: int = Field(2048, ge=1, le=1_000_000, description="Events waiting for export at most; beyond "
                                                                  "it they are dropped and counted, never waited on.")
    timeout_seconds: float = Field(5.0, gt=0, le=60, description="One export's timeout.")

    @model_validator(mode="after")
    def _endpoint(self) -> EvaluationEventsSpec:
        if self.enabled and not self.endpoint:
            raise ValueError("telemetry.evaluations.enabled needs an endpoint (an OTLP/HTTP logs URL)")
        if self.endpoint is not None:
            _check_url(self.endpoint)
        return self


class TelemetrySpec(Spec):
    """OpenTelemetry traces of the observer's own jobs, and its evaluation events."""

    traces: Literal["none", "console", "otlp"] = Field("none", description="Span exporter.")
    otlp_endpoint: str | None = Field(None, description="OTLP/HTTP endpoint when traces is otlp.")
    evaluations: EvaluationEventsSpec = Field(default_factory=EvaluationEventsSpec,
                                              description="Scores and verdicts as OTel GenAI evaluation events.")
