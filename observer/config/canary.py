"""Canary-vs-baseline judge and Argo templates. Owned by that area; the root config includes it."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal
from urllib.parse import quote

from pydantic import Field, field_validator, model_validator

from observer.config.base import Spec
from observer.config.prometheus import PrometheusClientSpec
from observer.conventions.ratios import RatioCounts
from observer.conventions.vllm import LatencyId

METRIC_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")

PAIRED_CHECKS: tuple[str, ...] = ("judge", "refusal", "empty", "invalid_json", "truncation", "repetition")
"""What a paired metric compares: the pairwise judge's preference, or one rule check on both answers."""

class MetricKind(StrEnum):
    """What a canary metric compares. Every place that acts on the kind matches on this enum and ends with
    `assert_never`, so a new kind that one of them forgets fails type checking."""

    RATIO = "ratio"
    LATENCY = "latency"
    QUALITY = "quality"
    DRIFT = "drift"
    COST = "cost"
    PAIRED = "paired"
    FEEDBACK = "feedback"


class CanaryPairSpec(Spec):
    """One canary compared with one baseline version."""

    canary: str = Field(description="Name of the canary version (fleet.versions[].name).")
    baseline: str = Field(description="Name of the baseline version it is compared with.")


class CanaryMetricSpec(Spec):
    """One metric the judge compares between canary and baseline."""

    name: str = Field(description="Metric name; becomes the bounded `metric` label. [a-z0-9_], ≤ 40.")
    kind: MetricKind = Field(
        description="ratio: share of bad requests (exact conditional test); latency: share above a bucket "
                    "edge + quantile ratio; quality: golden-set pass-rate non-inferiority; drift: the drift "
                    "area's verdict for a field; cost: cost per generated token, canary ÷ baseline, against "
                    "`max_ratio` (a point estimate, no test: keep it advisory); paired: the same prompts replayed "
                    "to both arms (quality.shadow), a sequential sign test on the pairs one arm won; feedback: users' "
                    "negative share (thumbs down, low ratings, regenerate, abandon) on sampled answers, the slice "
                    "test of ratio metrics, `nodata` below `min_responses` events an arm.")
    paired_check: str = Field(
        "judge", description="paired: `judge` (the pairwise judge, both orders) or a rule check run on both "
                             "answers of a pair (refusal, empty, invalid_json, truncation, repetition).")
    effect_share: float = Field(
        0.75, gt=0.5, lt=1, description="paired: share of decided pairs a worse canary loses that the judge "
                                        "must detect; sets the decided pairs needed before a Pass.")
    min_responses: int = Field(
        30, ge=1, le=1_000_000, description="feedback: events each arm needs in the window before the metric "
                                            "says more than nodata (users answer 2-10% of answers).")
    max_ratio: float = Field(1.25, gt=1, le=100, description="cost: the canary fails above this many times the "
                                                             "baseline's cost per generated token.")
    finished_reasons: list[str] = Field(
        default_factory=list,
        description="ratio: vLLM finished_reason values counted as bad (e.g. [error], [abort], [length]).")
    http_5xx: bool = Field(
        False, description="ratio: also count the generation 5xx responses of vLLM's HTTP server beyond the "
                           "`error` finishes (vLLM < 0.13 has no `error` finish reason; a request refused before "
                           "the engine has none).")
    http_4xx: bool = Field(
        False, description="ratio: count the generation 4xx responses of vLLM's HTTP server as the bad requests "
                           "(refused before the engine: a prompt over --max-model-len, a parameter the build "
                           "rejects). Both arms serve the same clients, so a canary refusing more of the same "
                           "traffic is the canary's doing.")
    live_check: str | None = Field(
        None, description="ratio: a quality live-check name (failures over total) instead of finished_reasons.")
    spec_decode: bool = Field(
        False, description="ratio: speculative decoding's rejected draft tokens over draft tokens (vLLM "
                           "spec_decode_num_draft_tokens, _accepted_tokens): a draft-model change is what a canary "
                           "ships, and a worse draft shows as more rejected tokens before any latency moves.")
    corrupted: bool = Field(
        False, description="ratio: finished requests with NaNs in their logits (vLLM corrupted_requests, counted "
                           "with VLLM_COMPUTE_NANS_IN_LOGITS=1) over finished requests: a broken quantisation or "
                           "kernel answers garbage that finishes like any other request.")
    family: LatencyId | None = Field(None, description="latency: which histogram.")
    le: str | None = Field(
        None, description="latency: the SLO bucket edge as exposed (`le` text, e.g. \"0.5\"); default: the "
                          "smallest edge at or above the baseline's `quantile`.")
    quantile: float = Field(0.95, gt=0, lt=1, description="latency: quantile whose canary/baseline ratio is shown.")
    golden_set: str | None = Field(None, description="quality: one golden set; default all of them.")
    margin: float = Field(0.05, gt=0, lt=1, description="quality: non-inferiority margin on the pass rate.")
    expected_pass_rate: float = Field(0.9, gt=0, lt=1, description="quality: pass rate assumed for sample size.")
    field: str | None = Field(None, description="drift: field of the drift result (prompts, outputs, …).")
    effect_ratio: float = Field(
        2.0, gt=1, le=100, description="ratio/latency: increase of the bad-event rate (canary ÷ baseline) the "
                                       "judge must detect with `power`; sets the minimum sample size.")
    shift_margin: float = Field(
        0.1, gt=0, lt=0.5, description="latency: the distribution shift (P(a canary request is slower than a "
                                        "baseline one) − ½) a pass must rule out with `power`, beside the "
                                        "share above the edge: a canary slower everywhere, under the SLO edge "
                                        "or not, does not pass.")
    base_rate: float = Field(
        0.01, gt=0, lt=1, description="ratio/latency: baseline bad-event rate assumed for the sample size when "
                                      "the observed one is lower (zero baseline errors).")
    critical: bool = Field(False, description="A Fail of this metric fails the canary; pass needs it Pass.")
    advisory: bool = Field(False, description="Reported only: never in the score or the verdict.")
    group: str = Field("default", description="Metric group for the weighted score.")

    @property
    def counts(self) -> RatioCounts | None:
        """What a ratio metric counts (conventions/ratios.py has each kind's row); None for other kinds."""
        if self.kind != "ratio":
            return None
        if self.live_check is not None:
            return RatioCounts.LIVE_CHECK
        if self.http_4xx:
            return RatioCounts.HTTP_4XX
        if self.spec_decode:
            return RatioCounts.SPEC_DECODE
        if self.corrupted:
            return RatioCounts.CORRUPTED
        return RatioCounts.FINISHED_REASONS

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not METRIC_NAME.match(v):
            raise ValueError(f"metric name {v!r} must match {METRIC_NAME.pattern}")
        return v

    @model_validator(mode="after")
    def _kind_fields(self) -> CanaryMetricSpec:
        if self.kind == "ratio" and (bool(self.finished_reasons) + (self.live_check is not None) + self.http_4xx
                                     + self.spec_decode + self.corrupted) != 1:
            raise ValueError(f"ratio metric {self.name!r} needs exactly one of finished_reasons, live_check, "
                             f"http_4xx, spec_decode or corrupted")
        if self.kind == "latency" and self.family is None:
            raise ValueError(f"latency metric {self.name!r} needs family (ttft, itl, e2e, queue or router_ttft)")
        if self.kind == "drift" and self.field is None:
            raise ValueError(f"drift metric {self.name!r} needs field (prompts, outputs, …)")
        if self.kind == "paired" and self.paired_check not in PAIRED_CHECKS:
            raise ValueError(f"paired metric {self.name!r}: paired_check {self.paired_check!r} is not one of "
                             f"{', '.join(PAIRED_CHECKS)}")
        if self.critical and self.advisory:
            raise ValueError(f"metric {self.name!r} cannot be both critical and advisory")
        return self


def default_metrics() -> list[CanaryMetricSpec]:
    """The metrics judged when the config lists none."""
    m = CanaryMetricSpec
    return [
        m(name="errors", kind="ratio", finished_reasons=["error"], http_5xx=True, critical=True, group="errors"),
        m(name="aborts", kind="ratio", finished_reasons=["abort"], group="errors"),
        m(name="truncations", kind="ratio", finished_reasons=["length"], base_rate=0.05, group="errors"),
        # Requests the canary refuses that stable serves (a lower --max-model-len, a stricter validator): users
        # see an error, the engine's counters never see the request.
        m(name="rejections", kind="ratio", http_4xx=True, group="errors"),
        m(name="ttft", kind="latency", family="ttft", critical=True, base_rate=0.05, group="latency"),
        m(name="e2e", kind="latency", family="e2e", base_rate=0.05, group="latency"),
        # Decode speed, which users feel as much as TTFT. Inter-token latency is one observation per decode
        # step, correlated within a request and a batch: the slice tests treat each minute as the unit, so
        # that dependence shows up in the design effect instead of in false fails.
        m(name="itl", kind="latency", family="itl", critical=True, base_rate=0.05, group="latency"),
        # Goodput on sampled requests (the exact joint of TTFT, TPOT and success per request). Not critical by
        # default: it needs the sampling proxy's timings, and a critical metric without data holds every
        # canary inconclusive. Make it critical where the proxy samples both arms.
        m(name="goodput", kind="ratio", live_check="goodput", base_rate=0.05, group="latency"),
        m(name="golden", kind="quality", group="quality"),
        m(name="refusals", kind="ratio", live_check="refusal", base_rate=0.02, group="quality"),
        m(name="empty_outputs", kind="ratio", live_check="empty", base_rate=0.02, group="quality"),
        m(name="invalid_json", kind="ratio", live_check="invalid_json", base_rate=0.02, group="quality"),
        m(name="drift_prompts", kind="drift", field="prompts", advisory=True, group="drift"),
        m(name="drift_outputs", kind="drift", field="outputs", advisory=True, group="drift"),
        m(name="cost_per_token", kind="cost", advisory=True, group="cost"),
    ]


class FairnessSpec(Spec):
    """Checks that the two arms are comparable before latency or anything else is judged."""

    per_pod_load_tolerance: float | None = Field(
        1.0, gt=0, description="Largest relative difference of requests per pod between the arms (1.0: "
                               "2×). A canary pod busier than that makes a latency Fail inconclusive; an "
                               "idler one, a latency Pass. null: off (e.g. latency that does not depend on load).")
    warmup_hit_ratio_gap: float | None = Field(
        0.2, gt=0, le=1, description="A canary prefix-cache hit ratio this far below the baseline's means it "
                                     "is still warming up: its latency is inconclusive. null: off.")
    same_environment: list[str] = Field(
        default_factory=lambda: ["gpu_model", "gpu_driver", "engine_args", "engine_version"],
        description="Facts that must match between arms (DCGM modelName and driver, vLLM cache_config_info, "
                    "vLLM's release from /version; `weights`, from /v1/models, can be listed too); a difference "
                    "makes the whole verdict inconclusive. Remove one when it is what rolls out (engine_version "
                    "for a vLLM upgrade).")


class ReportSpec(Spec):
    """The canary report pages (`GET /report`): where their links point, how much sampled text they show."""

    enabled: bool = Field(True, description="Serve /report and /report/canary/{canary}.")
    public_url: str | None = Field(
        None, description="The observer's URL as people's browsers reach it, for the links in alerts and in "
                          "`observer canary judge`; default: canary.observer_url.")
    prometheus_url: str | None = Field(
        None, description="Prometheus as browsers reach it, for each metric's query link; default: "
                          "canary.prometheus_url (no links when neither is set).")
    grafana_url: str | None = Field(None, description="Grafana as browsers reach it, for dashboard links "
                                                      "(the generated canary dashboard); null: no links.")
    examples: int = Field(3, ge=0, le=10, description="Worst lost pairs or live failures shown as text "
                                                      "(only to requests carrying the private-route token).")
    trace_url: str | None = Field(
        None, description="A trace viewer's URL with `{trace_id}` where the id goes (e.g. "
                          "https://jaeger.example/trace/{trace_id}, or Grafana Explore's): each worst answer links "
                          "to the trace of the request it came from; null: the trace id is shown as text.")

    @field_validator("public_url", "prometheus_url", "grafana_url", "trace_url")
    @classmethod
    def _http(cls, v: str | None) -> str | None:
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError(f"{v!r} must be an http:// or https:// URL")
        return v

    @field_validator("trace_url")
    @classmethod
    def _trace_id(cls, v: str | None) -> str | None:
        if v is not None and "{trace_id}" not in v:
            raise ValueError(f"{v!r} has no {{trace_id}} to put the request's trace id in")
        return v


class CanaryEndSpec(Spec):
    """What ends a canary that never decides (inconclusive, nodata or idle look after look)."""

    after_seconds: float | None = Field(
        7200.0, gt=0, description="Seconds a pair may stay undecided (since its first undecided look, or the "
                                  "gate's analysis start) before `then` applies; null: never.")
    then: Literal["hold", "fail"] = Field(
        "hold", description="hold: the verdict stays undecided (gates hold) and ObserverCanaryUndecided pages a "
                            "person; fail: the verdict becomes fail, naming the policy, so every gate rolls back.")


def go_seconds(duration: str) -> float:
    """Seconds of a Go duration such as Argo's intervals (`1m`, `30s`, `1m30s`); ValueError otherwise."""
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?", duration.strip())
    if parts is None or not duration.strip():
        raise ValueError(f"{duration!r} is not a duration such as 30s, 1m or 1m30s")
    h, m, sec = (float(x) if x else 0.0 for x in parts.groups())
    return h * 3600 + m * 60 + sec


class SLOCheckSpec(Spec):
    """The canary held to the `slo:` objectives, not only to its baseline (docs/canary.md, "Absolute SLO
    check"): every metric above compares the arms, so a canary as slow as a stable that already breaches its
    SLO passes them all."""

    enabled: bool = Field(
        False, description="Check the canary against each engine latency SLO (`slo.latency`, source engine, on "
                            "a histogram a latency metric reads) and each availability SLO: a canary whose bad "
                            "share in the window is over the SLO's allowance (1 − objective) is never passed, and "
                            "one over it by `margin` with enough slices fails. Off as shipped: with it on, a "
                            "fleet already over its objective promotes nothing, a fix included.")
    margin: float = Field(
        0.5, gt=0, le=10, description="Fail above (1 + margin) × the SLO's allowance, tested on slices: at 0.5 a "
                                      "95% TTFT objective fails a canary shown to be above 7.5%.")


class CanarySpec(Spec):
    """Canary-vs-baseline judge and Argo templates."""

    enabled: bool = Field(True, description="Turn this area on or off.")
    pairs: list[CanaryPairSpec] = Field(
        default_factory=list,
        description="Pairs to judge; default: every role=canary version against the one role=stable version.")
    window_seconds: float = Field(
        1800.0, gt=0, description="Data window of a look (set it to at least the canary step length: "
                                  "looks within one window are cumulative, which the sequential test needs).")
    slice_seconds: float = Field(
        60.0, ge=1, le=600, description="Each window is cut into slices this long: the bad-event tests treat "
                                         "requests within one slice as possibly dependent (one pod's queue, "
                                         "a stall, a restart) and slices as independent.")
    step_seconds: float | None = Field(
        None, gt=0, le=86_400, description="The planned length of an analysis step where the gate does not say "
                                           "(the verdict API's step_seconds, Flagger's metadata.step_seconds, "
                                           "`observer canary wait --planned`): the sliced tests spend most of "
                                           "their α at its end (docs/canary.md, \"Planned looks\"). null: "
                                           "anytime-valid tests unless the gate says.")
    fairness: FairnessSpec = Field(default_factory=FairnessSpec, description="Comparability checks.")
    interval_seconds: float = Field(30.0, gt=0, description="Seconds between judge runs (gauges refresh).")
    alpha: float = Field(0.01, gt=0, lt=0.5, description="False-fail budget of one canary step over all "
                                                          "looks; split over the critical metrics.")
    power: float = Field(0.8, gt=0.5, lt=1, description="Power at the configured effect sizes (sample sizes).")
    pass_score: float = Field(95.0, ge=0, le=100, description="Score at or above which the canary passes.")
    marginal_score: float = Field(75.0, ge=0, le=100, description="Score below which the canary fails.")
    groups: dict[str, float] = Field(
        default_factory=lambda: {"errors": 1.0, "latency": 1.0, "quality": 1.0, "drift": 1.0, "cost": 1.0,
                                 "default": 1.0},
        description="Weight of each metric group in the score.")
    metrics: list[CanaryMetricSpec] = Field(default_factory=default_metrics, description="Metrics judged.")
    source: Literal["own", "prometheus"] = Field(
        "own", description="own: this observer's scrapes; prometheus: query `prometheus_url` for the "
                           "counters/histograms that per-pod observers export (fleet mode).")
    prometheus_url: str | None = Field(None, description="Prometheus base URL when source is prometheus.")
    prometheus: PrometheusClientSpec = Field(default_factory=PrometheusClientSpec,
                                             description="Auth, tenant headers, timeouts, retries and limits of "
                                                         "the PromQL queries (Prometheus, Thanos, Mimir).")
    split_tolerance: float = Field(
        0.5, gt=0, le=10, description="Largest relative deviation of the observed canary share from the "
                                      "expected one (fleet.versions[].expected_traffic_weight).")
    split_min_requests: int = Field(200, ge=1, description="Requests (both arms) before the split is checked.")
    observer_url: str = Field(
        "http://observer.observability.svc:9464",
        description="The observer's URL as Argo Rollouts reaches it (rendered web-provider templates).")
    argo_namespace: str = Field("llm-serving", description="Namespace of the rendered AnalysisTemplates.")
    argo_interval: str = Field("1m", description="Argo measurement interval of the rendered templates.")
    argo_count: int = Field(15, ge=2, le=1000, description="Measurements of the web gate in one analysis step.")
    planned_end: bool = Field(
        True, description="The rendered gates give the verdict their step's planned end (Argo's web gate: "
                          "(argo_count − 1) × argo_interval; Flagger's example webhooks: metadata.step_seconds), "
                          "where the sliced tests spend most of their α. false: anytime-valid tests at every look "
                          "(a gate whose steps do not end when the template says).")
    report: ReportSpec = Field(default_factory=ReportSpec, description="The canary report pages.")
    slo_check: SLOCheckSpec = Field(default_factory=SLOCheckSpec,
                                    description="The canary held to the SLO objectives as well as its baseline.")
    end: CanaryEndSpec = Field(default_factory=CanaryEndSpec,
                               description="The end of a canary that never decides: hold and page, or fail.")

    def report_url(self, canary: str | None = None, baseline: str | None = None) -> str:
        """The report index, or one pair's page (names are URL-quoted; `{{…}}` templates pass through)."""

        def part(name: str) -> str:
            return name if name.startswith("{{") else quote(name, safe="")

        base = (self.report.public_url or self.observer_url).rstrip("/") + "/report"
        if canary is None:
            return base
        url = f"{base}/canary/{part(canary)}"
        return url if baseline is None else f"{url}?baseline={part(baseline)}"

    @model_validator(mode="after")
    def _check(self) -> CanarySpec:
        if self.marginal_score > self.pass_score:
            raise ValueError("marginal_score must not exceed pass_score")
        names = [m.name for m in self.metrics]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate canary metric name(s): {', '.join(dupes)}")
        unknown = sorted({m.group for m in self.metrics if not m.advisory} - set(self.groups))  # advisory: unscored
        if unknown:
            raise ValueError(f"metric group(s) without a weight in canary.groups: {', '.join(unknown)}")
        if self.source == "prometheus" and not self.prometheus_url:
            raise ValueError("source prometheus needs prometheus_url")
        step = self.argo_count * go_seconds(self.argo_interval)
        if self.end.then == "fail" and self.end.after_seconds is not None and self.end.after_seconds >= step:
            raise ValueError(f"canary.end.then is fail after {self.end.after_seconds:g} s, but an Argo gate step "
                             f"ends Inconclusive (a pause) after argo_count × argo_interval = {step:g} s, before "
                             f"the policy can fail it: lower canary.end.after_seconds or raise argo_count")
        return self
