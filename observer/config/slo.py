"""Service-level objectives and alerting. Owned by that area; the root config includes it.

Every field is described once, here. `observer render alerts` maps this spec to frozen objectives
(observer.render.objectives) and renders Prometheus rules, promtool tests and a PrometheusRule.
"""

from __future__ import annotations

import bisect
import re
from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from observer.config.base import Spec
from observer.conventions import vllm
from observer.conventions.metrics import ALERT_NAMES

SLO_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")

# The SLO section's spelling of the latency ids (observer.conventions.latency): `inter_token` is its alias of
# `itl`, kept because rule and dashboard names carry it. Everything else maps it with latency_family().
HistogramKind = Literal["ttft", "inter_token", "e2e", "queue"]

# vLLM's default bucket edges, by the SLO section's histogram names (see observer.conventions.vllm).
VLLM_DEFAULT_EDGES: dict[str, tuple[float, ...]] = {
    kind: vllm.DEFAULT_EDGES[vllm.latency_id(kind)] for kind in get_args(HistogramKind)
}

ErrorReason = Literal["stop", "length", "abort", "error", "repetition"]


def _check_name(value: str) -> str:
    if not SLO_NAME.match(value):
        raise ValueError(f"SLO name {value!r} must match {SLO_NAME.pattern} (it becomes a label value)")
    return value


def nearest_edges(value: float, edges: tuple[float, ...] | list[float]) -> list[float]:
    """The bucket edges just below and just above `value` (one of them at the ends)."""
    ordered = sorted(edges)
    i = bisect.bisect_left(ordered, value)
    return ordered[max(0, i - 1):i + 1]


AVAILABILITY_ERROR_REASONS: tuple[ErrorReason, ...] = ("error",)


def _default_error_reasons() -> list[ErrorReason]:
    return ["error", "abort"]


class _Objective(Spec):
    name: str = Field(description="SLO name (label value `slo`), unique among SLOs.")
    objective: float = Field(gt=0, lt=1, description="Target fraction of good events over the period, "
                                                     "e.g. 0.999.")
    versions: list[str] = Field(
        default_factory=list,
        description="Fleet versions this SLO applies to; empty: every version that is not retired.",
    )
    fast_burn_severity: Literal["page", "ticket"] | None = Field(
        None, description="Severity of the fast-burn alert (ObserverSLOBurnRatePage): page wakes someone, "
                          "ticket does not. Default: page for latency, availability and goodput; ticket for "
                          "golden quality and live checks (a quality dip is not a 3 a.m. page).")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra labels on this SLO's alerts (e.g. team, owner), over "
                                          "slo.alert_labels.")

    @field_validator("labels", check_fields=False)
    @classmethod
    def _labels(cls, v: dict[str, str]) -> dict[str, str]:
        return _check_labels(v)

    @field_validator("name", check_fields=False)
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_name(v)


class LatencySLOSpec(_Objective):
    """A latency SLO read from a histogram: `objective` of requests finish under `threshold_seconds`."""

    source: Literal["engine", "client", "probe"] = Field(
        "engine", description="engine: vLLM's histograms (every request); client: the sampling proxy's "
                              "client-side histograms (what users wait, network and queueing in front of vLLM "
                              "included; ttft and e2e only, vLLM's default edges); probe: the synthetic probe's "
                              "TTFT through the configured route (`probe`; ttft only).")

    name: str = Field("ttft-latency", description="SLO name (label value `slo`), unique among SLOs.")
    histogram: HistogramKind = Field("ttft", description="Which vLLM histogram: ttft | inter_token | e2e | "
                                                         "queue.")
    threshold_seconds: float = Field(2.5, gt=0, description="A request is good when at or under this; "
                                                            "must be one of `bucket_edges`.")
    objective: float = Field(0.95, gt=0, lt=1, description="Target fraction of requests under the threshold.")
    bucket_edges: list[float] | None = Field(
        None, description="Bucket edges the deployed vLLM exports for this histogram; default: vLLM's "
                          "defaults. Set it when vLLM runs with --custom-histogram-buckets.",
    )

    @model_validator(mode="after")
    def _edge(self) -> LatencySLOSpec:
        if self.source == "client" and (self.histogram not in ("ttft", "e2e") or self.bucket_edges):
            raise ValueError("a client-side latency SLO reads the proxy's ttft or e2e histogram, whose edges "
                             "are vLLM's defaults: use histogram ttft or e2e and no bucket_edges")
        if self.source == "probe" and (self.histogram != "ttft" or self.bucket_edges):
            raise ValueError("a probe latency SLO reads the probe's ttft histogram, whose edges are vLLM's "
                             "defaults: use histogram ttft and no bucket_edges")
        edges = self.edges()
        if not vllm.has_edge(edges, self.threshold_seconds):
            near = " or ".join(f"{e:g}" for e in nearest_edges(self.threshold_seconds, edges))
            flag = vllm.custom_buckets_flag(vllm.latency_id(self.histogram), self.threshold_seconds,
                                            tuple(self.bucket_edges) if self.bucket_edges else None)
            raise ValueError(
                f"threshold_seconds {self.threshold_seconds:g} is not a bucket edge of the {self.histogram} "
                f"histogram, so no series can count requests under it (a rule on it would never fire); "
                f"nearest edges: {near}. Pick an edge, or start vLLM (>= 0.32) with "
                f"{flag} "
                f"and list the same edges in bucket_edges (`observer check-config --edges-from URL` reads "
                f"them from a live /metrics)"
            )
        return self

    def edges(self) -> tuple[float, ...]:
        """The configured bucket edges, or vLLM's defaults for this histogram."""
        return tuple(self.bucket_edges) if self.bucket_edges else VLLM_DEFAULT_EDGES[self.histogram]


class AvailabilitySLOSpec(_Objective):
    """An availability SLO: requests finished with one of `error_reasons` are bad."""

    name: str = Field("availability", description="SLO name (label value `slo`), unique among SLOs.")
    objective: float = Field(0.999, gt=0, lt=1, description="Target fraction of requests that succeed.")
    error_reasons: list[ErrorReason] = Field(
        default_factory=lambda: list(AVAILABILITY_ERROR_REASONS),
        min_length=1,
        description="vLLM finished_reason values counted as failures. Errors only by default: client aborts "
                    "(users closing a stream) are not the service failing — a healthy fleet's 0.5% aborts "
                    "would burn a 99.9% budget at 5×; add `abort` to count them.",
    )


class ClientAvailabilitySLOSpec(_Objective):
    """An availability SLO as users see it, from the sampling proxy's status codes: 5xx answers (the engine's,
    and the proxy's own 502/504 when the upstream is unreachable or times out) are bad; client aborts (499)
    count in neither. Catches what vLLM's finish reasons miss (a dead pod, a gateway timeout, vLLM < 0.13
    which has no `error` finish reason)."""

    name: str = Field("client-availability", description="SLO name (label value `slo`), unique among SLOs.")
    source: Literal["proxy", "probe"] = Field(
        "proxy", description="proxy: the sampling proxy's answers to users; probe: the synthetic probe's answers "
                             "through the configured route (`probe`), which also measure a path no user is on.")
    objective: float = Field(0.999, gt=0, lt=1, description="Target fraction of answered requests that are not "
                                                            "5xx.")
    error_codes: list[str] = Field(default_factory=lambda: ["5.."],
                                   description="HTTP status codes (regex parts, e.g. 5.., 429) counted as bad.")

    @field_validator("error_codes")
    @classmethod
    def _codes(cls, v: list[str]) -> list[str]:
        for c in v:
            if not re.fullmatch(r"[0-9.]{3}", c):
                raise ValueError(f"status code {c!r} must be three digits or dots (e.g. 5.., 504, 429)")
        return v


class GoodputSLOSpec(_Objective):
    """A goodput SLO: the share of finished requests that met the TTFT target *and* the time-per-output-token
    target *and* did not fail. vLLM exports the two latencies as separate histograms, so the rules bound the
    joint from the marginals: bad ≤ TTFT-bad + TPOT-bad + failed (the union bound, an upper bound on bad
    events: conservative, it may burn faster than the exact joint, never slower). The exact joint is
    measured on sampled requests by the `goodput` live check (docs/cost.md)."""

    name: str = Field("goodput", description="SLO name (label value `slo`), unique among SLOs.")
    objective: float = Field(0.95, gt=0, lt=1, description="Target fraction of requests that are good.")
    ttft_threshold_seconds: float = Field(2.5, gt=0, description="TTFT target; a bucket edge of the TTFT "
                                                                 "histogram.")
    tpot_threshold_seconds: float = Field(0.1, gt=0, description="Time-per-output-token target; a bucket edge "
                                                                 "of the TPOT histogram (vLLM's ITL edges).")
    error_reasons: list[ErrorReason] = Field(default_factory=_default_error_reasons, min_length=1,
                                             description="finished_reason values that make a request bad.")
    ttft_bucket_edges: list[float] | None = Field(None, description="Deployed TTFT edges (custom buckets).")
    tpot_bucket_edges: list[float] | None = Field(None, description="Deployed TPOT edges (custom buckets).")

    @model_validator(mode="after")
    def _edges(self) -> GoodputSLOSpec:
        for what, value, edges in (("ttft", self.ttft_threshold_seconds, self.ttft_edges()),
                                   ("tpot", self.tpot_threshold_seconds, self.tpot_edges())):
            if not vllm.has_edge(edges, value):
                near = " or ".join(f"{e:g}" for e in nearest_edges(value, edges))
                raise ValueError(f"{what}_threshold_seconds {value:g} is not a bucket edge of the {what} histogram "
                                 f"(no series counts requests under it); nearest edges: {near}. Pick an edge, or "
                                 f"list the deployed edges in {what}_bucket_edges")
        return self

    def ttft_edges(self) -> tuple[float, ...]:
        return tuple(self.ttft_bucket_edges) if self.ttft_bucket_edges else VLLM_DEFAULT_EDGES["ttft"]

    def tpot_edges(self) -> tuple[float, ...]:
        return tuple(self.tpot_bucket_edges) if self.tpot_bucket_edges else vllm.ITL_EDGES


class QualitySLOSpec(_Objective):
    """A quality SLO: the pass rate of golden-set items scored by the quality runner."""

    name: str = Field("golden-quality", description="SLO name (label value `slo`), unique among SLOs.")
    objective: float = Field(0.9, gt=0, lt=1, description="Target fraction of golden items that pass.")
    golden_set: str | None = Field(None, description="Only this golden set; default: all golden sets.")


class LiveCheckSLOSpec(_Objective):
    """A live-check SLO: the failure ratio of one rule check (or the judge) on sampled live outputs, so a
    slow quality decay burns a budget (refusals creeping up) before anyone looks at a dashboard."""

    name: str = Field("live-refusals", description="SLO name (label value `slo`), unique among SLOs.")
    check: str = Field("refusal", description="Live check (quality.live.checks, or `judge`).")
    objective: float = Field(0.98, gt=0, lt=1, description="Target fraction of checked live samples that pass.")


RESERVED_LABELS = frozenset({"severity", "sli", "slo", "version", "alertname", "le", "job", "instance"})


def _check_labels(v: dict[str, str]) -> dict[str, str]:
    for k, val in v.items():
        if not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", k) or k.startswith("__"):
            raise ValueError(f"label name {k!r} is not a valid Prometheus label name")
        if k in RESERVED_LABELS:
            raise ValueError(f"label {k!r} is set by the observer; pick another name (e.g. team, owner)")
        if not val or len(val) > 128:
            raise ValueError(f"label {k!r} needs a value of 1–128 characters")
    return v


class LeadingSpec(Spec):
    """Thresholds of the leading-indicator warnings (early signs, before an SLO burns)."""

    queue_depth_per_replica: float = Field(8.0, gt=0, description="Waiting requests per replica.")
    kv_cache_usage: float = Field(0.9, gt=0, le=1, description="KV-cache usage fraction (max over replicas).")
    gpu_framebuffer_used: float = Field(0.95, gt=0, le=1, description="GPU framebuffer used fraction (max).")
    preemptions_per_second: float = Field(0.5, gt=0, description="Preemptions per second per version.")
    shed_ratio: float = Field(0.01, gt=0, lt=1, description="Share of proxied requests shed (429/503) that "
                                                            "warns: capacity is short before latency burns.")
    corrupted_ratio: float = Field(0.001, gt=0, lt=1, description="Share of finished requests with NaNs in their "
                                                                  "logits (vLLM with VLLM_COMPUTE_NANS_IN_LOGITS=1) "
                                                                  "that pages: users get garbage.")
    for_seconds: float = Field(600.0, ge=0, description="How long a leading indicator must hold to fire.")
    throttled_share: float = Field(0.1, gt=0, le=1, description="Share of time the version's average GPU is "
                                                                "throttled (power or thermal) that warns.")
    restarts_per_15m: int = Field(3, ge=1, description="vLLM restarts of one version within 15 minutes that "
                                                       "make a restart storm.")
    near_limit_share: float = Field(0.05, gt=0, lt=1, description="Share of a version's prompts near its "
                                                                  "max_model_len that warns (refusals come next).")
    uncapped_share: float = Field(0.2, gt=0, lt=1, description="Share of proxied generation requests without "
                                                               "max_tokens that warns (a runaway answer may run "
                                                               "to max_model_len).")
    ttft_tail_ratio: float = Field(10.0, gt=1, description="p99 ÷ p50 TTFT of a version that warns: a few "
                                                           "requests wait far longer than the typical one.")
    path_ttft_seconds: float = Field(5.0, gt=0, description="p95 time to first token along the users' path — at "
                                                            "the router (llm-d EPP, Dynamo), of the synthetic probe "
                                                            "and of golden replays — that warns.")


class StalenessSpec(Spec):
    """How old the observer's own signals may get before a self-health alert fires."""

    target_down_seconds: float = Field(300.0, gt=0, description="A scrape target down this long.")
    signals_seconds: float = Field(300.0, gt=0, description="No successful scrape of a version this long.")
    job_failing_seconds: float = Field(3600.0, gt=0, description="A periodic job failing, no success this long.")
    golden_hours: float = Field(6.0, gt=0, description="Golden set not run for this many hours.")
    drift_hours: float = Field(3.0, gt=0, description="Drift check not run for this many hours.")
    judge_hours: float = Field(6.0, gt=0, description="No successful LLM-judge call for this many hours.")
    verdict_seconds: float = Field(1800.0, gt=0, description="Canary verdict not evaluated this long.")
    absent_for_seconds: float = Field(600.0, ge=0, description="An SLI series missing this long pages.")


class PrometheusRuleMeta(Spec):
    """Metadata of the generated PrometheusRule custom resource (deploy/prometheusrule.yaml)."""

    name: str = Field("observer-slo", description="metadata.name of the PrometheusRule.")
    namespace: str | None = Field(None, description="metadata.namespace; default: none (kubectl's).")
    labels: dict[str, str] = Field(
        default_factory=lambda: {"app.kubernetes.io/part-of": "observer"},
        description="metadata.labels, e.g. the label your Prometheus ruleSelector matches.",
    )


class SLOSpec(Spec):
    """Service-level objectives and alerting."""

    enabled: bool = Field(True, description="Turn this area on or off.")
    period_days: int = Field(30, ge=1, le=365, description="SLO period; burn-rate factors scale with it.")
    latency: list[LatencySLOSpec] = Field(default_factory=lambda: [LatencySLOSpec()],
                                          description="Latency SLOs (histogram threshold + objective).")
    availability: list[AvailabilitySLOSpec] = Field(default_factory=lambda: [AvailabilitySLOSpec()],
                                                    description="Availability SLOs (errors + aborts).")
    quality: list[QualitySLOSpec] = Field(default_factory=list,
                                          description="Golden-set pass-rate SLOs (need golden sets run).")
    goodput: list[GoodputSLOSpec] = Field(default_factory=list,
                                          description="Goodput SLOs (TTFT and TPOT targets met, not failed).")
    client_availability: list[ClientAvailabilitySLOSpec] = Field(
        default_factory=list, description="Client-side availability SLOs (the sampling proxy's 5xx).")
    live_checks: list[LiveCheckSLOSpec] = Field(default_factory=list,
                                                description="Live-check failure-ratio SLOs (sampled outputs).")
    alert_labels: dict[str, str] = Field(
        default_factory=dict, description="Labels on every generated alert (owner, team, …) for routing.")
    alert_severity: dict[str, Literal["page", "ticket", "warning", "info"]] = Field(
        default_factory=dict,
        description="Severity per generated alert name, over the defaults (docs/alerts.md lists both), e.g. "
                    "{ObserverGPUXidErrors: warning, ObserverSLIAbsent: ticket}. An unknown name is refused.")
    leading: LeadingSpec = Field(default_factory=LeadingSpec, description="Leading-indicator thresholds.")
    staleness: StalenessSpec = Field(default_factory=StalenessSpec, description="Self-health limits.")
    keep_firing: bool = Field(
        True, description="Burn-rate alerts keep firing for their tier's longest short window (page 30m, "
                          "ticket 6h) so low traffic does not re-page per dip; needs Prometheus ≥ 2.42.",
    )
    runbook_base_url: str = Field(
        "https://github.com/observer-llm/observer/blob/main/runbooks",
        description="Every alert's runbook_url is this + '/<page>.md'; pages live in runbooks/.",
    )
    observer_job: str = Field("observer", description="Prometheus job label of the observer's own scrape.")
    prometheus_rule: PrometheusRuleMeta = Field(default_factory=PrometheusRuleMeta,
                                                description="PrometheusRule metadata.")
    time_scale: float = Field(
        1.0, gt=0, le=1,
        description="TEST ONLY: multiply every alert window and `for` by this (e.g. 1/60 makes 1h a "
                    "minute) so integration tests fire within a minute. Keep 1 in production.",
    )

    @model_validator(mode="after")
    def _unique(self) -> SLOSpec:
        seen: set[str] = set()
        for slo in (*self.latency, *self.availability, *self.quality, *self.goodput, *self.live_checks,
                    *self.client_availability):
            if slo.name in seen:
                raise ValueError(f"duplicate SLO name {slo.name!r}")
            seen.add(slo.name)
        _check_labels(self.alert_labels)
        unknown = sorted(set(self.alert_severity) - set(ALERT_NAMES))
        if unknown:
            raise ValueError(f"alert_severity names no generated alert: {', '.join(unknown)} (the alerts: "
                             f"{', '.join(sorted(ALERT_NAMES))})")
        if not self.runbook_base_url.strip():
            raise ValueError("runbook_base_url must not be empty")
        return self
