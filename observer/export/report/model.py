"""What the canary report shows, computed from the canary service's snapshots: no store or Prometheus query
here. Pure: (verdict, both arms' data, config) in, plain rows out; the templates only lay them out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from observer import conventions as names
from observer.analyse.canary.fairness import engine_trouble, per_pod_load_ratio
from observer.analyse.canary.judge import metric_slices
from observer.analyse.canary.results import ArmData, MetricResult, Outcome, Verdict
from observer.config.canary import CanaryMetricSpec, CanarySpec, MetricKind
from observer.config.spec import ObserverConfig
from observer.conventions.labels import ENGINE_VERSION, WEIGHTS, EngineState
from observer.conventions.latency import LATENCY
from observer.conventions.ratios import ratio_query
from observer.export.report import plots

LATENCY_FAMILIES = ("ttft", "itl", "e2e")
RUNBOOK = "canary-failed"
"""The runbook page for a failing or undecided canary; its sections are named after metric kinds and verdicts."""


@dataclass(frozen=True)
class MetricRow:
    """One metric of the verdict as the table shows it."""

    name: str
    kind: str
    outcome: str
    role: str  # critical | scored | advisory
    canary: str
    baseline: str
    interval: str  # the interval, or the boundary a pass must stay within
    n: str
    enough: bool | None  # n against the minimum n (None: no minimum)
    p_value: str
    detail: str
    query_url: str | None
    dashboard_url: str | None


@dataclass(frozen=True)
class Check:
    """One fairness check: what it compares, both arms' values, and pass | problem | unknown."""

    name: str
    canary: str
    baseline: str
    status: str
    note: str = ""


@dataclass(frozen=True)
class Example:
    """One worst answer as redacted text: a lost pair (both answers) or a live failure (the canary's)."""

    kind: str  # lost pair | live failure
    prompt: str
    canary: str
    baseline: str
    why: str
    trace_id: str = ""
    """The W3C trace id of the request it came from (32 hex digits), when that request carried one."""
    trace_url: str = ""
    """report.trace_url with that id in it; empty: no viewer configured."""


@dataclass(frozen=True)
class PairPage:
    """Everything the pair page shows."""

    canary: str
    baseline: str
    verdict: str
    reason: str
    score: float
    evaluated_at: float
    age_seconds: float
    window_seconds: float
    looks: int
    weight: str
    metrics: tuple[MetricRow, ...]
    failing: tuple[str, ...]
    plots: tuple[plots.Plot, ...]
    missing_plots: tuple[str, ...]  # "title: why" for each plot there was no data to draw
    fairness: tuple[Check, ...]
    changes: str  # what the canary changes besides its weights, in words (engine_version, weights); "" unknown
    golden: tuple[tuple[str, str, str], ...]  # (set, canary pass rate, baseline pass rate)
    paired: tuple[tuple[str, Mapping[str, int]], ...]
    paired_note: str
    judge: Mapping[str, str]
    kappa: str
    drift: tuple[tuple[str, str, str, str], ...]  # (field, status, p-value, drift?)
    cost: tuple[str, str]
    notes: tuple[str, ...]  # missing or failing sources, areas that never ran
    runbooks: tuple[tuple[str, str], ...]  # (metric, url)
    commands: tuple[str, ...]
    examples: tuple[Example, ...] | None  # None: no token; () none found
    report_url: str
    extra: Mapping[str, Any] = field(default_factory=dict)


def _num(x: float | None, spec: str = ".4g") -> str:
    return "—" if x is None else format(x, spec)


def _value(r: MetricResult, x: float | None) -> str:
    if x is None:
        return "—"
    if r.kind in ("ratio", "latency", "quality", "slo"):
        return f"{x:.3%}" if x < 0.1 else f"{x:.1%}"
    if r.kind == "paired":
        return f"{x:.1%} lost"
    return f"{x:.4g}"


def _interval(r: MetricResult, m: CanaryMetricSpec | None) -> str:
    if r.ci_low is not None and r.ci_high is not None:
        what = "quantile ratio" if r.kind == "latency" else "difference" if r.kind == "quality" else "interval"
        return f"{what} [{r.ci_low:.3g}, {r.ci_high:.3g}]"
    if r.kind == "slo" and r.baseline is not None:
        return f"objective allows {r.baseline:.3%}"
    if m is None:
        return "—"
    match m.kind:
        case MetricKind.RATIO | MetricKind.LATENCY | MetricKind.FEEDBACK:
            return f"pass under {m.effect_ratio:g}× baseline"
        case MetricKind.QUALITY:
            return f"margin {m.margin:g}"
        case MetricKind.COST:
            return f"fail above {m.max_ratio:g}×"
        case MetricKind.PAIRED:
            return f"fail when loss share ≫ {0.5 + m.effect_share / 2:.2g}"
        case MetricKind.DRIFT:
            return "drift test at its own α"
    return "—"


def prometheus_link(base: str | None, expr: str) -> str | None:
    """A Prometheus graph link for `expr` (None without a base URL)."""
    if not base:
        return None
    return f"{base.rstrip('/')}/graph?" + urlencode({"g0.expr": expr, "g0.tab": "0", "g0.range_input": "1h"})


def metric_query(m: CanaryMetricSpec | None, result: str, canary: str, baseline: str, window: float) -> str:
    """The PromQL that shows a metric's evidence for both arms over the window: what the judge compared (the
    per-arm counters or histograms), or the exported result for kinds read from the observer's own areas."""
    arms = f'{names.VERSION}=~"{canary}|{baseline}"'
    rng = f"[{max(60, round(window))}s]"
    if m is not None and m.counts is not None:
        return ratio_query(m.counts, arms={names.VERSION: f"{canary}|{baseline}"}, window=rng,
                           reasons=m.finished_reasons, check=m.live_check)
    if m is not None and m.kind == MetricKind.LATENCY and m.family is not None:
        bucket = f"{LATENCY[m.family].exported}_bucket"
        return (f"histogram_quantile({m.quantile}, sum by ({names.VERSION}, le) "
                f"(increase({bucket}{{{arms}}}{rng})))")
    return result


def metric_rows(config: ObserverConfig, v: Verdict) -> tuple[MetricRow, ...]:
    spec = config.canary
    by_name = {m.name: m for m in spec.metrics}
    prom = spec.report.prometheus_url or spec.prometheus_url
    grafana = spec.report.grafana_url
    dashboard = (f"{grafana.rstrip('/')}/d/{quote(config.dashboards.uid_prefix + 'canary')}?"
                 + urlencode({"var-canary": v.canary, "var-baseline": v.baseline})) if grafana else None
    rows = []
    for r in v.metrics:
        exported = (f'{names.CANARY_METRIC_RESULT}{{canary="{v.canary}",baseline="{v.baseline}",'
                    f'metric="{r.name}"}}')
        expr = metric_query(by_name.get(r.name), exported, v.canary, v.baseline, v.window_seconds)
        n = f"{r.n_canary} / {r.n_baseline}" if r.kind != "paired" else f"{r.n_canary} decided"
        if r.min_n is not None:
            n += f" (min {r.min_n})"
        rows.append(MetricRow(
            name=r.name, kind=r.kind, outcome=str(r.outcome),
            role="critical" if r.critical else "advisory" if r.advisory else "scored",
            canary=_value(r, r.canary), baseline=_value(r, r.baseline), interval=_interval(r, by_name.get(r.name)),
            n=n, enough=None if r.min_n is None else r.n_canary >= r.min_n, p_value=_num(r.p_value, ".2g"),
            detail=r.detail, query_url=prometheus_link(prom, expr), dashboard_url=dashboard))
    return tuple(rows)


def _share(a: ArmData, reasons: Sequence[str]) -> float | None:
    if a.requests is None:
        return None
    total = sum(a.requests.values())
    return None if total <= 0 else sum(a.requests.get(r, 0.0) for r in reasons) / total


def _status_share(a: ArmData, cls: str) -> float | None:
    if not a.http_status:
        return None
    total = sum(a.http_status.values())
    return None if total <= 0 else a.http_status.get(cls, 0.0) / total


def build_plots(spec: CanarySpec, v: Verdict, c: ArmData, b: ArmData
                ) -> tuple[list[plots.Plot], list[str]]:
    """Every plot the page draws, and "title: why" for each that had nothing to draw."""
    out: list[plots.Plot] = []
    missing: list[str] = []
    for family in LATENCY_FAMILIES:
        p = plots.histogram_overlay(family, c.histograms.get(family), b.histograms.get(family))
        if p is None:
            missing.append(f"{family} histogram: no {family} observations in both arms over the window")
        else:
            out.append(p)
    results = {r.name: r for r in v.metrics}
    series = []
    for m in spec.metrics:
        rows = metric_slices(m, c, b)
        r = results.get(m.name)
        if rows is None or r is None or r.outcome is Outcome.NODATA:
            continue
        series.append(plots.SliceSeries(m.name, rows, m.effect_ratio, r.worse_since))
    evidence = plots.slice_evidence(series)
    if evidence is None:
        missing.append("slice evidence: no sliced bad-event metric has data in both arms (the window has "
                       f"{len(c.slices)} canary slices)")
    else:
        out.append(evidence)
    errors = plots.ratio_series("error and 5xx share", [
        ("canary errors", [_share(s, ("error", "abort")) for s in c.slices]),
        ("baseline errors", [_share(s, ("error", "abort")) for s in b.slices]),
        ("canary 5xx", [_status_share(s, "5xx") for s in c.slices]),
        ("baseline 5xx", [_status_share(s, "5xx") for s in b.slices]),
    ]) if c.slices or b.slices else None
    if errors is None:
        missing.append("error and 5xx share: no request or HTTP status counters per slice")
    else:
        out.append(errors)
    return out, missing


def fairness(spec: CanarySpec, v: Verdict, c: ArmData, b: ArmData) -> tuple[Check, ...]:
    f = spec.fairness
    out = []
    if v.expected_share is None:
        out.append(Check("traffic split", _num(v.canary_share, ".3g"), "—", "unknown",
                         "no expected weight (configured or from the Rollout's step)"))
    else:
        out.append(Check("traffic split", f"{_num(v.canary_share, '.3g')} of requests", f"expected "
                         f"{v.expected_share:.3g}", "pass" if v.split_ok else "problem",
                         f"tolerance {spec.split_tolerance:g}"))
    ratio = per_pod_load_ratio(f, c, b)
    load = (f"{c.total_requests or 0} requests on {c.replicas or '?'} pod(s)",
            f"{b.total_requests or 0} requests on {b.replicas or '?'} pod(s)")
    if ratio is None or f.per_pod_load_tolerance is None:
        out.append(Check("per-pod load", *load, "unknown", "off, or pods or requests unknown"))
    else:
        tol = f.per_pod_load_tolerance
        ok = 1.0 / (1.0 + tol) <= ratio <= 1.0 + tol
        out.append(Check("per-pod load", *load, "pass" if ok else "problem",
                         f"canary {ratio:.2g}× baseline per pod (tolerance {1 + tol:g}×)"))
    hc, hb = c.prefix_cache_hit_ratio, b.prefix_cache_hit_ratio
    if hc is None or hb is None or f.warmup_hit_ratio_gap is None:
        out.append(Check("warm-up (prefix-cache hit ratio)", _num(hc, ".2f"), _num(hb, ".2f"), "unknown",
                         "off, or no prefix-cache counters"))
    else:
        ok = hb - hc <= f.warmup_hit_ratio_gap
        out.append(Check("warm-up (prefix-cache hit ratio)", f"{hc:.2f}", f"{hb:.2f}", "pass" if ok else "problem",
                         f"a gap above {f.warmup_hit_ratio_gap:g} means the canary is still warming up"))
    def engines(a: ArmData) -> str:
        parts = [f"{n} {state}" for state in (EngineState.UNHEALTHY, EngineState.HUNG, EngineState.ASLEEP)
                 if (n := a.in_state(state))]
        return ", ".join(parts) or f"{a.replicas if a.replicas is not None else '?'} serving"

    trouble = engine_trouble(c, b)
    out.append(Check("engines", engines(c), engines(b),
                     "problem" if trouble or c.in_state(EngineState.ASLEEP) or b.in_state(EngineState.ASLEEP)
                     else "pass",
                     "; ".join(trouble) or "unhealthy or hung engines make the verdict inconclusive, asleep ones idle"))
    keys = sorted(set(c.environment) | set(b.environment) | set(f.same_environment))
    for key in keys:
        vc, vb = c.environment.get(key, ""), b.environment.get(key, "")
        checked = key in f.same_environment
        if not vc or not vb:
            status = "unknown"
        elif not checked:
            status = "info"
        else:
            status = "pass" if vc == vb else "problem"
        out.append(Check(key, vc[:120] or "—", vb[:120] or "—", status,
                         "must match" if checked else "shown, not checked"))
    return tuple(out)


def what_changes(c: ArmData, b: ArmData) -> str:
    """The canary's change in words, from the engine release and the weights both arms report: an engine
    upgrade under the same weights, new weights on the same engine, or both at once (which no verdict can tell
    apart). Empty where an arm does not report them, or nothing differs."""
    (ce, be), (cw, bw) = ((c.environment.get(k, ""), b.environment.get(k, "")) for k in (ENGINE_VERSION, WEIGHTS))
    engine = bool(ce and be and ce != be)
    weights = bool(cw and bw and cw != bw)
    if engine and weights:
        return (f"The engine and the weights change at once: vLLM {be} → {ce} and {bw} → {cw}. A difference the "
                f"verdict finds cannot be told apart between them; roll one out at a time.")
    if engine:
        same = " under the same weights" if cw and cw == bw else " (the weights are not reported)"
        return f"An engine upgrade{same}: vLLM {be} → {ce}."
    if weights:
        same = f" on the same engine (vLLM {ce})" if ce and ce == be else ""
        return f"New weights{same}: {bw} → {cw}."
    return ""


def _rate(x: tuple[int, int] | None) -> str:
    return "—" if x is None or x[1] <= 0 else f"{x[0] / x[1]:.1%} of {x[1]}"


def page(config: ObserverConfig, v: Verdict, c: ArmData, b: ArmData, *, now: float, looks: int,
         kappa: float | None, commands: Sequence[str], examples: Sequence[Example] | None) -> PairPage:
    spec = config.canary
    drawn, missing = build_plots(spec, v, c, b)
    golden_sets = sorted(set(c.golden) | set(b.golden))
    notes = [n for n in (c.note and f"canary data: {c.note}", b.note and f"baseline data: {b.note}") if n]
    if not c.golden and not b.golden:
        notes.append("golden sets: no scored items in the window (the golden job never ran, or is off)")
    if not c.drift:
        notes.append("drift: no result for the canary (the drift check never ran, or is off)")
    failed = [r for r in v.metrics if r.outcome is Outcome.FAIL]
    failing = tuple(r.name for r in failed)
    base = config.slo.runbook_base_url.rstrip("/")
    runbooks = tuple((r.name, f"{base}/{RUNBOOK}.md#{r.kind}") for r in failed)
    if not runbooks and v.verdict is Outcome.FAIL and v.undecided_seconds > 0:
        # No metric failed: canary.end failed a canary that never decided; its runbook says why it could not.
        runbooks = (("canary.end", f"{base}/canary-undecided.md"),)
    elif not runbooks and v.verdict is not Outcome.PASS:
        runbooks = ((str(v.verdict), f"{base}/{RUNBOOK}.md#{v.verdict}"),)
    return PairPage(
        canary=v.canary, baseline=v.baseline, verdict=str(v.verdict), reason=v.reason, score=v.score,
        evaluated_at=v.evaluated_at, age_seconds=max(0.0, now - v.evaluated_at), window_seconds=v.window_seconds,
        looks=looks, weight="—" if v.expected_share is None else f"{v.expected_share:.3g}",
        metrics=metric_rows(config, v), failing=failing, plots=tuple(drawn), missing_plots=tuple(missing),
        fairness=fairness(spec, v, c, b), changes=what_changes(c, b),
        golden=tuple((s or "all sets", _rate(c.golden.get(s)), _rate(b.golden.get(s))) for s in golden_sets),
        paired=tuple((check, counts.evidence()) for check, counts in sorted(c.paired.items())),
        paired_note=c.paired_note, judge=dict(v.judge), kappa="—" if kappa is None else f"{kappa:.3f}",
        drift=tuple((fld, d.status, _num(d.p_value, ".3g"), "drift" if d.drift else "no drift")
                    for fld, d in sorted(c.drift.items())),
        cost=(_num(c.cost_per_million_tokens), _num(b.cost_per_million_tokens)), notes=tuple(notes),
        runbooks=runbooks, commands=tuple(commands), examples=None if examples is None else tuple(examples),
        report_url=spec.report_url(v.canary, v.baseline))
