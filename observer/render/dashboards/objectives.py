"""The numbers dashboards draw as thresholds, read from the SLO, canary and drift config.

One place maps config → thresholds, through the alert renderer's own internal model
(observer.render.objectives.build_alerting), so a panel turns red exactly where the alert fires.
Numbers no config section defines (GPU temperature, live-check failure rate) are documented defaults here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from observer.config.slo import AvailabilitySLOSpec
from observer.config.spec import ObserverConfig
from observer.render.alerts import rule_groups
from observer.render.burnrate import TIERS, duration
from observer.render.objectives import SliKind, build_alerting
from observer.render.rulemodel import Alert

GPU_TEMPERATURE_CELSIUS = 85.0  # NVIDIA datacentre GPUs throttle from about 85–90 °C
LIVE_CHECK_FAILURE_RATIO = 0.05


@dataclass(frozen=True)
class BurnLine:
    """A burn-rate threshold: alert severity, long window and factor."""

    severity: str
    window: str
    factor: float


@dataclass(frozen=True)
class Objectives:
    """Thresholds for the dashboards, all from config (or the documented defaults above)."""

    latency_seconds: dict[str, tuple[float, float]]  # histogram family → (threshold s, objective)
    availability: float
    error_reasons: tuple[str, ...]
    golden_pass_ratio: float | None
    period: str
    burn_lines: tuple[BurnLine, ...]
    queue_depth_per_replica: float
    kv_cache_usage: float
    gpu_framebuffer_used: float
    preemptions_per_second: float
    canary_pass_score: float
    canary_marginal_score: float
    runbook_base_url: str
    gpu_temperature_celsius: float = GPU_TEMPERATURE_CELSIUS
    gpu_throttled_share: float = 0.1
    drift_p_value: float = 0.01
    live_check_failure_ratio: float = LIVE_CHECK_FAILURE_RATIO
    goodput: float | None = None  # objective of the first goodput SLO
    cost_budget_per_million: float | None = None
    engine_spans: bool = False  # sampling.engine_spans.enabled: the outside-the-engine panels are drawn

    @property
    def error_budget(self) -> float:
        """Allowed error ratio (1 − availability objective)."""
        return 1.0 - self.availability

    @property
    def error_reason_regex(self) -> str:
        """The error finish reasons as a PromQL regex alternative."""
        return "|".join(self.error_reasons)

    def latency(self, family: str) -> tuple[float, float] | None:
        """(threshold seconds, objective) of the latency SLO on `family`, if one is configured."""
        return self.latency_seconds.get(family)

    runbook_pages: dict[str, tuple[str, ...]] = field(default_factory=dict)  # alert → runbook pages

    def runbook_links(self, alert: str) -> list[tuple[str, str]]:
        """(title, url) of each runbook page the alert renderer gives `alert` (none if it renders no such alert).

        `alert` may carry a hint after a colon (`ObserverSLOBurnRatePage:latency`) to keep only the pages
        whose name contains it.
        """
        name, _, hint = alert.partition(":")
        pages = [p for p in self.runbook_pages.get(name, ()) if hint in p]
        base = self.runbook_base_url.rstrip("/")
        return [(f"Runbook: {name} ({page})" if len(pages) > 1 else f"Runbook: {name}", f"{base}/{page}.md")
                for page in pages]


def objectives(config: ObserverConfig) -> Objectives:
    """The dashboard thresholds for `config`."""
    alerting = build_alerting(config)
    latency: dict[str, tuple[float, float]] = {}
    for o in alerting.objectives:
        if o.kind is SliKind.LATENCY:
            latency.setdefault(o.histogram, (o.threshold_seconds, o.objective))
    # The first SLO of a kind draws the lines; without an availability SLO the config's default is used.
    available = next((o for o in alerting.objectives if o.kind is SliKind.AVAILABILITY), None)
    availability = available.objective if available else AvailabilitySLOSpec().objective
    reasons = available.error_reasons if available else tuple(AvailabilitySLOSpec().error_reasons)
    golden = next((o.objective for o in alerting.objectives if o.kind is SliKind.QUALITY), None)
    lines = tuple(BurnLine(t.severity, duration(p.long_seconds), p.factor(alerting.period_seconds))
                  for t in TIERS for p in t.pairs)
    lim = alerting.limits
    pages: dict[str, set[str]] = {}
    for group in rule_groups(config) if config.slo.enabled else []:
        for rule in group.rules:
            if isinstance(rule, Alert):
                pages.setdefault(rule.name, set()).add(rule.runbook)
    return Objectives(
        latency_seconds=latency, availability=availability, error_reasons=tuple(reasons),
        golden_pass_ratio=golden, period=duration(alerting.period_seconds), burn_lines=lines,
        queue_depth_per_replica=lim.queue_depth_per_replica, kv_cache_usage=lim.kv_cache_usage,
        gpu_framebuffer_used=lim.gpu_framebuffer_used, preemptions_per_second=lim.preemptions_per_second,
        gpu_throttled_share=lim.throttled_share, drift_p_value=config.drift.alpha,
        canary_pass_score=config.canary.pass_score,
        canary_marginal_score=config.canary.marginal_score,
        runbook_base_url=config.slo.runbook_base_url,
        runbook_pages={alert: tuple(sorted(p)) for alert, p in pages.items()},
        goodput=next((o.objective for o in alerting.objectives if o.kind is SliKind.GOODPUT), None),
        cost_budget_per_million=config.cost.budget_per_million_tokens,
        engine_spans=config.sampling.enabled and config.sampling.engine_spans.enabled,
    )

