"""The internal alerting model: frozen SLOs and limits, mapped once from the `slo` config section.

Renderers read these types only; the types never import the spec (style rule 2). `build_alerting`
is the one place that maps the spec, resolves version lists against the fleet and scales time.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum
from typing import TYPE_CHECKING

from observer import conventions as names
from observer.analyse.pairs import resolve_pairs
from observer.conventions import vllm
from observer.conventions.latency import latency_family
from observer.errors import ConfigError

if TYPE_CHECKING:
    from observer.config.spec import ObserverConfig

CLIENT_HISTOGRAMS: dict[str, str] = {"ttft": names.PROXY_TTFT, "e2e": names.PROXY_E2E}
"""The sampling proxy's client-side histograms (`slo.latency[].source: client`)."""
CLIENT_COUNTERS: dict[str, str] = {"proxy": names.PROXY_REQUESTS, "probe": names.PROBE_REQUESTS}
"""Requests by status code per `slo.client_availability[].source`."""


class SliKind(StrEnum):
    """What an SLO measures; also the `sli` label value and the runbook page suffix."""

    LATENCY = "latency"
    AVAILABILITY = "availability"
    QUALITY = "quality"
    GOODPUT = "goodput"
    LIVE = "live"
    CLIENT = "client"


@dataclass(frozen=True)
class Objective:
    """One SLO for a set of versions; `versions` is never empty."""

    name: str
    kind: SliKind
    objective: float
    versions: tuple[str, ...]
    histogram: str = ""  # latency: exported histogram family name
    le: str = ""  # latency: the `le` label text exactly as the observer exports it
    threshold_seconds: float = 0.0
    error_reasons: tuple[str, ...] = ()  # availability
    golden_set: str | None = None  # quality
    tpot_le: str = ""  # goodput: the TPOT (and ITL fallback) `le` text; `le` is the TTFT one
    tpot_threshold_seconds: float = 0.0
    check: str = ""  # live: the live-check name
    error_codes: tuple[str, ...] = ()  # client: HTTP status code regex parts counted as bad
    counter: str = names.PROXY_REQUESTS  # client: the requests-by-code counter (proxy or probe)
    page_severity: str = "page"  # severity of the fast-burn tier ("page" or "ticket")
    owner: tuple[tuple[str, str], ...] = ()  # the SLO's own routing labels (team, owner)

    @property
    def budget(self) -> float:
        """The error budget: the fraction of bad events allowed over the period."""
        return 1.0 - self.objective


@dataclass(frozen=True)
class Limits:
    """Leading-indicator thresholds and self-health limits; durations in seconds, already scaled."""

    queue_depth_per_replica: float
    kv_cache_usage: float
    gpu_framebuffer_used: float
    preemptions_per_second: float
    shed_ratio: float
    corrupted_ratio: float
    throttled_share: float
    restarts_per_15m: int
    path_ttft_seconds: float
    near_limit_share: float
    uncapped_share: float
    ttft_tail_ratio: float
    leading_for: float
    target_down: float
    signals_stale: float
    job_failing: float
    golden_stale: float
    drift_stale: float
    judge_stale: float
    verdict_stale: float
    absent_for: float


@dataclass(frozen=True)
class Alerting:
    """Everything the rule renderers need."""

    objectives: tuple[Objective, ...]
    limits: Limits
    period_seconds: float
    time_scale: float
    keep_firing: bool
    live_versions: tuple[str, ...]
    retired_versions: tuple[str, ...]
    runbook_base_url: str
    observer_job: str
    quality_enabled: bool
    judge_enabled: bool
    drift_enabled: bool
    canary_enabled: bool
    fingerprint_enabled: bool
    canary_pairs: tuple[tuple[str, str], ...]  # (canary, baseline) judged by the canary area
    rule_name: str
    rule_namespace: str | None
    rule_labels: tuple[tuple[str, str], ...]
    cost_enabled: bool = False
    cost_budget_per_million: float | None = None
    cost_regression_ratio: float = 1.25
    alert_labels: tuple[tuple[str, str], ...] = ()
    """Routing labels on every alert (slo.alert_labels)."""
    alert_severity: tuple[tuple[str, str], ...] = ()
    """Severity per alert name over the renderers' defaults (slo.alert_severity)."""
    canary_hold_after: float | None = None
    """canary.end with `then: hold`: page when a pair stays undecided this many seconds (None: no alert)."""
    judge_kappa_floor: float | None = None
    """Alert when the judge's agreement with the anchors falls below this (None: no anchors re-graded)."""
    engine_spans_enabled: bool = False
    """sampling.engine_spans: the proxies expect vLLM's OTLP request spans."""
    canary_report_url: str | None = None
    """The canary report page as an annotation template (`{{ $labels.canary }}`…); None: reports off."""

    def runbook_url(self, page: str) -> str:
        """The runbook_url of a page in runbooks/."""
        return f"{self.runbook_base_url.rstrip('/')}/{page}.md"


def build_alerting(config: ObserverConfig) -> Alerting:
    """Map the `slo` section (with the fleet) to the internal model; ConfigError names the bad key."""
    slo = config.slo
    live = tuple(v.name for v in config.fleet.versions if not v.retired)
    retired = tuple(v.name for v in config.fleet.versions if v.retired)
    known = {v.name for v in config.fleet.versions}

    def versions(section: str, index: int, chosen: list[str]) -> tuple[str, ...]:
        for name in chosen:
            if name not in known:
                raise ConfigError(f"unknown version {name!r}; the fleet has: {', '.join(sorted(known)) or 'none'}",
                                  path=f"slo.{section}.{index}.versions")
        return tuple(chosen) if chosen else live

    objectives: list[Objective] = []
    for i, lat in enumerate(slo.latency):
        objectives.append(Objective(
            name=lat.name, kind=SliKind.LATENCY, objective=lat.objective,
            versions=versions("latency", i, lat.versions),
            histogram=(CLIENT_HISTOGRAMS[lat.histogram] if lat.source == "client"
                       else names.PROBE_TTFT if lat.source == "probe" else latency_family(lat.histogram).exported),
            le=vllm.format_le(lat.threshold_seconds), threshold_seconds=lat.threshold_seconds))
    for i, av in enumerate(slo.availability):
        objectives.append(Objective(
            name=av.name, kind=SliKind.AVAILABILITY, objective=av.objective,
            versions=versions("availability", i, av.versions), error_reasons=tuple(av.error_reasons)))
    for i, gp in enumerate(slo.goodput):
        objectives.append(Objective(
            name=gp.name, kind=SliKind.GOODPUT, objective=gp.objective,
            versions=versions("goodput", i, gp.versions), histogram=names.HIST_TTFT,
            le=vllm.format_le(gp.ttft_threshold_seconds), threshold_seconds=gp.ttft_threshold_seconds,
            tpot_le=vllm.format_le(gp.tpot_threshold_seconds), tpot_threshold_seconds=gp.tpot_threshold_seconds,
            error_reasons=tuple(gp.error_reasons)))
    for i, ca in enumerate(slo.client_availability):
        objectives.append(Objective(
            name=ca.name, kind=SliKind.CLIENT, objective=ca.objective,
            versions=versions("client_availability", i, ca.versions), error_codes=tuple(ca.error_codes),
            counter=CLIENT_COUNTERS[ca.source]))
    if config.quality.enabled:
        for i, q in enumerate(slo.quality):
            objectives.append(Objective(
                name=q.name, kind=SliKind.QUALITY, objective=q.objective,
                versions=versions("quality", i, q.versions), golden_set=q.golden_set))
        for i, lc in enumerate(slo.live_checks):
            known_checks = [*config.quality.live.checks, "judge"]
            if lc.check not in known_checks:
                raise ConfigError(f"live check {lc.check!r} is not run; quality.live.checks: "
                                  f"{', '.join(known_checks)}", path=f"slo.live_checks.{i}.check")
            objectives.append(Objective(
                name=lc.name, kind=SliKind.LIVE, objective=lc.objective,
                versions=versions("live_checks", i, lc.versions), check=lc.check))
    specs = {o.name: o for o in (*slo.latency, *slo.availability, *slo.goodput, *slo.quality, *slo.live_checks,
                                 *slo.client_availability)}
    objectives = [replace(o, page_severity=specs[o.name].fast_burn_severity
                          or ("ticket" if o.kind in (SliKind.QUALITY, SliKind.LIVE) else "page"),
                          owner=tuple(sorted(specs[o.name].labels.items()))) for o in objectives]

    scale = slo.time_scale
    lead, stale = slo.leading, slo.staleness
    limits = Limits(
        queue_depth_per_replica=lead.queue_depth_per_replica, kv_cache_usage=lead.kv_cache_usage,
        gpu_framebuffer_used=lead.gpu_framebuffer_used, preemptions_per_second=lead.preemptions_per_second,
        shed_ratio=lead.shed_ratio, corrupted_ratio=lead.corrupted_ratio, throttled_share=lead.throttled_share,
        restarts_per_15m=lead.restarts_per_15m, path_ttft_seconds=lead.path_ttft_seconds,
        near_limit_share=lead.near_limit_share, uncapped_share=lead.uncapped_share,
        ttft_tail_ratio=lead.ttft_tail_ratio,
        leading_for=lead.for_seconds * scale, target_down=stale.target_down_seconds * scale,
        signals_stale=stale.signals_seconds * scale, job_failing=stale.job_failing_seconds * scale,
        golden_stale=stale.golden_hours * 3600 * scale, drift_stale=stale.drift_hours * 3600 * scale,
        judge_stale=stale.judge_hours * 3600 * scale, verdict_stale=stale.verdict_seconds * scale,
        absent_for=stale.absent_for_seconds * scale,
    )
    pairs = tuple((p.canary, p.baseline) for p in resolve_pairs(config)) if config.canary.enabled else ()
    return Alerting(
        objectives=tuple(o for o in objectives if o.versions), limits=limits,
        period_seconds=slo.period_days * 86400.0, time_scale=scale, keep_firing=slo.keep_firing,
        live_versions=live,
        retired_versions=retired, runbook_base_url=slo.runbook_base_url, observer_job=slo.observer_job,
        canary_report_url=config.canary.report_url("{{ $labels.canary }}", "{{ $labels.baseline }}")
        if config.canary.enabled and config.canary.report.enabled else None,
        quality_enabled=config.quality.enabled,
        judge_enabled=config.quality.enabled and config.quality.judge.url is not None,
        drift_enabled=config.drift.enabled,
        fingerprint_enabled=config.sampling.enabled and config.sampling.fingerprint.enabled,
        engine_spans_enabled=config.sampling.enabled and config.sampling.engine_spans.enabled,
        canary_enabled=bool(pairs), canary_pairs=pairs, rule_name=slo.prometheus_rule.name,
        rule_namespace=slo.prometheus_rule.namespace,
        rule_labels=tuple(sorted(slo.prometheus_rule.labels.items())),
        cost_enabled=config.cost.enabled and config.cost.priced,
        cost_budget_per_million=config.cost.budget_per_million_tokens,
        cost_regression_ratio=config.cost.regression_ratio,
        alert_labels=tuple(sorted(slo.alert_labels.items())),
        alert_severity=tuple(sorted(slo.alert_severity.items())),
        canary_hold_after=config.canary.end.after_seconds if config.canary.end.then == "hold" else None,
        judge_kappa_floor=config.quality.reliability.kappa_floor if config.quality.enabled
        and config.quality.judge.url is not None and config.quality.reliability.anchors_path else None,
    )
