"""Canary analysis: canary vs stable side by side, the judge's verdict and score, per-metric results, arms."""

from __future__ import annotations

from observer import conventions as names
from observer.config.spec import ObserverConfig
from observer.render.dashboards.common import (
    GREEN,
    RED,
    YELLOW,
    DashboardSpec,
    PanelSpec,
    Query,
    Section,
    Step,
    quantile_expr,
    rate,
    sel,
)
from observer.render.dashboards.objectives import Objectives

V = names.VERSION
C, B = names.CANARY, names.BASELINE
PAIR = f"{C}, {B}"
PAIR_LEGEND = f"{{{{{C}}}}} vs {{{{{B}}}}}"
REQ = names.REQUESTS + "_total"
VERDICTS = {"1": ("pass", GREEN), "0": ("inconclusive", YELLOW), "-1": ("fail", RED)}


def _canary(family: str) -> str:
    # Canary series are keyed by the canary version: the version variable filters the `canary` label.
    return sel(family, version_label=C, model=False)


def _verdict(obj: Objectives) -> Section:
    score_steps = (Step(None, RED), Step(obj.canary_marginal_score, YELLOW), Step(obj.canary_pass_score, GREEN))
    return Section("Verdict", [
        PanelSpec(
            title="Verdict", kind="stat", unit="none", width=6, height=6, mappings=VERDICTS,
            runbooks=(names.ALERT_VERDICT_STALE,),
            description="The judge's latest verdict per canary/baseline pair: pass, inconclusive (not enough data "
                        "yet, or marginal) or fail. Argo Rollouts reads the same verdict.",
            queries=[Query(f"max by ({PAIR}) ({_canary(names.CANARY_VERDICT)})", PAIR_LEGEND, instant=True)],
        ),
        PanelSpec(
            title="Score", kind="stat", unit="none", width=6, height=6, min=0, max=100, thresholds=score_steps,
            description=(f"100 × passing metrics ÷ decided metrics. Pass at ≥ {obj.canary_pass_score:g}, "
                         f"marginal at ≥ {obj.canary_marginal_score:g} (canary config)."),
            queries=[Query(f"max by ({PAIR}) ({_canary(names.CANARY_SCORE)})", PAIR_LEGEND, instant=True)],
        ),
        PanelSpec(
            title="Critical metric failed", kind="stat", unit="bool_yes_no", width=6, height=6,
            thresholds=(Step(1, RED),),
            description="Yes when a metric marked critical failed: the canary fails whatever the score.",
            queries=[Query(f"max by ({PAIR}) ({_canary(names.CANARY_CRITICAL_FAILED)})", PAIR_LEGEND,
                           instant=True)],
        ),
        PanelSpec(
            title="Since last evaluation", kind="stat", unit="s", width=6, height=6,
            runbooks=(names.ALERT_VERDICT_STALE,),
            description="Seconds since the judge last evaluated the pair; a stale verdict means the judge stopped.",
            queries=[Query(f"time() - max by ({PAIR}) ({_canary(names.CANARY_LAST_EVALUATED)})", PAIR_LEGEND,
                           instant=True)],
        ),
        PanelSpec(
            title="Verdict over time", kind="state", unit="none", width=12, height=6, mappings=VERDICTS,
            description="Verdict history: how long the canary stayed inconclusive before the judge decided.",
            queries=[Query(f"max by ({PAIR}) ({_canary(names.CANARY_VERDICT)})", PAIR_LEGEND)],
        ),
        PanelSpec(
            title="Score over time", unit="none", width=12, height=6, min=0, max=100, thresholds=score_steps[1:],
            description="Score history; dashed lines: marginal and pass thresholds.",
            queries=[Query(f"max by ({PAIR}) ({_canary(names.CANARY_SCORE)})", PAIR_LEGEND)],
        ),
    ])


def _metrics() -> Section:
    m = names.METRIC
    return Section("Per-metric results", [
        PanelSpec(
            title="Per-metric result", kind="state", unit="none", width=16, height=8, mappings=VERDICTS,
            description="Each compared metric: pass (canary not worse than baseline), inconclusive, or fail.",
            queries=[Query(f"max by ({PAIR}, {m}) ({_canary(names.CANARY_METRIC_RESULT)})",
                           f"{{{{{C}}}}} {{{{{m}}}}}")],
        ),
        PanelSpec(
            title="Samples per arm", unit="short", width=8, height=8,
            description="Observations behind the comparison per arm (canary, baseline); too few → inconclusive.",
            queries=[Query(f"max by ({C}, {names.ARM}) ({_canary(names.CANARY_SAMPLES)})",
                           f"{{{{{C}}}}} {{{{{names.ARM}}}}}")],
        ),
    ])


def _side_by_side(config: ObserverConfig) -> Section:
    everyone = f"sum({rate(REQ, version_label='')})"
    errors = rate(REQ, finished_reason="error")
    expected = [Query(f'label_replace(vector({v.expected_traffic_weight:g}), "{V}", "{v.name}", "", "")',
                      f"{v.name} expected")
                for v in config.fleet.versions if v.expected_traffic_weight is not None]
    return Section("Canary vs stable", [
        PanelSpec(
            title="Traffic split", unit="percentunit", width=12, min=0, max=1, runbooks=(names.ALERT_RETIRED_TRAFFIC,),
            description="Share of all finished requests served by each version, and the share the fleet config "
                        "expects (expected_traffic_weight).",
            queries=[Query(f"sum by ({V}) ({rate(REQ)}) / scalar({everyone})", f"{{{{{V}}}}}"), *expected],
        ),
        PanelSpec(
            title="Error ratio", unit="percentunit", width=12, runbooks=(f"{names.ALERT_BURN_PAGE}:availability",),
            description="Share of requests finished with `error` per version, canary and stable together.",
            queries=[Query(f"sum by ({V}) ({errors}) / sum by ({V}) ({rate(REQ)})",
                           f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="Pods by state", unit="none", width=24, min=0, runbooks=(names.ALERT_PODS_NOT_ARRIVING,),
            description="Pods of each version by state (Kubernetes discovery): ready, or why not — unschedulable "
                        "(the scheduler's reason, e.g. insufficient_gpu), starting, failing (crashloop, "
                        "image_pull), not_ready. A canary waiting for pods is never passed.",
            queries=[Query(f"sum by ({V}, {names.STATE}, {names.REASON}) ({sel(names.VERSION_PODS, model=False)})",
                           f"{{{{{V}}}}} {{{{{names.STATE}}}}} {{{{{names.REASON}}}}}")],
        ),
        PanelSpec(
            title="Time to first token p95", unit="s", width=8,
            description="p95 TTFT per version from the accumulated histograms.",
            queries=[Query(quantile_expr(names.HIST_TTFT, 0.95), f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="Inter-token latency p95", unit="s", width=8,
            description="p95 time between output tokens per version.",
            queries=[Query(quantile_expr(names.HIST_ITL, 0.95), f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="End-to-end latency p95", unit="s", width=8,
            description="p95 request latency per version.",
            queries=[Query(quantile_expr(names.HIST_E2E, 0.95), f"{{{{{V}}}}}")],
        ),
    ])


def _identity() -> Section:
    part = names.PART
    return Section("Version identity", [
        PanelSpec(
            title="Observed fingerprints", unit="percentunit", width=12, min=0, max=1,
            runbooks=(names.ALERT_FINGERPRINT_CHANGED,),
            description="Share of each version's sampled requests per observed (system prompt, sampling "
                        "parameters) hash pair in the current window (top-k): one line per version is one build.",
            queries=[Query(f"max by ({V}, {names.TEMPLATE_HASH}, {names.SAMPLING_HASH}) "
                           f"({sel(names.FINGERPRINT_SHARE)})",
                           f"{{{{{V}}}}} {{{{{names.TEMPLATE_HASH}}}}}/{{{{{names.SAMPLING_HASH}}}}}")],
        ),
        PanelSpec(
            title="Fingerprint changed or undeclared", kind="state", unit="none", width=12,
            runbooks=(names.ALERT_FINGERPRINT_MISMATCH,),
            description="1 when a version's observed template or sampling hash changed without a new version "
                        "(changed), or is not the one declared in the fleet config (mismatch).",
            queries=[Query(f"max by ({V}, {part}) ({sel(names.FINGERPRINT_CHANGED)})",
                           f"{{{{{V}}}}} {{{{{part}}}}} changed"),
                     Query(f"max by ({V}, {part}) ({sel(names.FINGERPRINT_MISMATCH)})",
                           f"{{{{{V}}}}} {{{{{part}}}}} mismatch")],
        ),
    ])


def dashboard(obj: Objectives, config: ObserverConfig) -> DashboardSpec:
    """The canary analysis dashboard."""
    return DashboardSpec(
        slug="canary", title="Canary analysis",
        description="Canary vs baseline: verdict and score over time, per-metric results, samples, traffic split.",
        sections=[_verdict(obj), _metrics(), _side_by_side(config), _identity()],
    )

