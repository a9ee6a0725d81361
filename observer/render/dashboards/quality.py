"""Quality and drift: golden-set pass rates, judge scores and errors, live rule checks, drift per field, the users'
feedback and the tenants."""

from __future__ import annotations

from observer import conventions as names
from observer.render.dashboards.common import (
    ORANGE,
    RATE,
    RED,
    YELLOW,
    DashboardSpec,
    PanelSpec,
    Query,
    Section,
    Step,
    rate,
    sel,
    tenant_token_share,
)
from observer.render.dashboards.objectives import Objectives

V = names.VERSION
G = names.GOLDEN_SET
F = names.FIELD
VG = f"{V}, {G}"
VG_LEGEND = f"{{{{{V}}}}} {{{{{G}}}}}"
VF_LEGEND = f"{{{{{V}}}}} {{{{{F}}}}}"


def _golden(obj: Objectives) -> Section:
    return Section("Golden sets", [
        PanelSpec(
            title="Golden-set pass rate", unit="percentunit", width=12, min=0, max=1,
            thresholds=(Step(None, RED), Step(obj.golden_pass_ratio, "green")) if obj.golden_pass_ratio else (),
            runbooks=(f"{names.ALERT_BURN_PAGE}:quality", names.ALERT_GOLDEN_NOT_RUN),
            description=("Share of golden-set items the judge/assertions passed in the latest run, per version "
                         "and set. " + (f"Quality SLO objective: {obj.golden_pass_ratio:g}."
                                        if obj.golden_pass_ratio else "No quality SLO is configured.")),
            queries=[Query(f"max by ({VG}) ({sel(names.GOLDEN_PASS_RATIO, model=False)})", VG_LEGEND)],
        ),
        PanelSpec(
            title="Judge mean score", unit="percentunit", width=12, min=0, max=1,
            description="Mean item score (0–1) of the latest golden run per version and set.",
            queries=[Query(f"max by ({VG}) ({sel(names.GOLDEN_MEAN_SCORE, model=False)})", VG_LEGEND)],
        ),
        PanelSpec(
            title="Judge errors", unit="short", width=8, thresholds=(Step(1, ORANGE),),
            runbooks=(names.ALERT_JUDGE_NOT_RUNNING,),
            description="Items the judge could not score (unparseable verdict, length cut, HTTP failure) per "
                        "version and set. Judge errors are never counted as passes or failures.",
            queries=[Query(f"sum by ({VG}) (increase({sel(names.GOLDEN_JUDGE_ERRORS + '_total', model=False)}"
                           f"[{RATE}]))", VG_LEGEND)],
        ),
        PanelSpec(
            title="Judge calls by outcome", unit="short", width=8,
            description="LLM-judge calls per second by outcome (ok, error, unparseable, ...), all versions.",
            queries=[Query(f"sum by ({names.OUTCOME}) "
                           f"({rate(names.JUDGE_CALLS + '_total', version_label='', model=False)})",
                           f"{{{{{names.OUTCOME}}}}}")],
        ),
        PanelSpec(
            title="Items scored per run", unit="short", width=8,
            description="Golden items scored in the latest run per version and set (small runs are noisy).",
            queries=[Query(f"max by ({VG}) ({sel(names.GOLDEN_SCORED, model=False)})", VG_LEGEND)],
        ),
        PanelSpec(
            title="Since last golden run", kind="stat", unit="s", width=24, height=5,
            description="Seconds since the latest golden run per version and set.",
            queries=[Query(f"time() - max by ({VG}) ({sel(names.GOLDEN_LAST_RUN, model=False)})", VG_LEGEND,
                           instant=True)],
        ),
    ])


def _live(obj: Objectives) -> Section:
    c = names.CHECK
    checks = sel(names.LIVE_CHECKS + "_total", model=False)
    failures = sel(names.LIVE_CHECK_FAILURES + "_total", model=False)
    return Section("Live rule checks", [
        PanelSpec(
            title="Live check failure rate", unit="percentunit", width=16, min=0,
            thresholds=(Step(obj.live_check_failure_ratio, RED),),
            description=(f"Share of sampled live outputs failing each rule check (refusal, empty, JSON schema, "
                         f"...) per version. Dashed line: {obj.live_check_failure_ratio:g}."),
            queries=[Query(f"sum by ({V}, {c}) (rate({failures}[{RATE}])) / sum by ({V}, {c}) "
                           f"(rate({checks}[{RATE}]))", f"{{{{{V}}}}} {{{{{c}}}}}")],
        ),
        PanelSpec(
            title="Live checks per second", unit="short", width=8,
            description="Sampled outputs checked per second per version (the denominator of the failure rate).",
            queries=[Query(f"sum by ({V}) ({rate(names.LIVE_CHECKS + '_total', model=False)})", f"{{{{{V}}}}}")],
        ),
    ])


def _drift(obj: Objectives) -> Section:
    return Section("Drift", [
        PanelSpec(
            title="Drift p-value", unit="none", width=12, min=0, max=1,
            thresholds=(Step(None, RED), Step(obj.drift_p_value, "green")), runbooks=(names.ALERT_DRIFT_NOT_RUN,),
            description=(f"Permutation p-value of the two-sample test (current window vs pinned baseline) per "
                         f"version and field. Below {obj.drift_p_value:g} (dashed) counts as drift."),
            queries=[Query(f"max by ({V}, {F}) ({sel(names.DRIFT_P_VALUE, model=False)})", VF_LEGEND)],
        ),
        PanelSpec(
            title="Drift statistic", unit="none", width=12,
            description="Test statistic per version and field (MMD² for embeddings, KS/χ² for scalar features).",
            queries=[Query(f"max by ({V}, {F}) ({sel(names.DRIFT_STATISTIC, model=False)})", VF_LEGEND)],
        ),
        PanelSpec(
            title="Drift detected", kind="state", unit="none", width=12,
            mappings={"0": ("no drift", "green"), "1": ("drift", RED)}, runbooks=(names.ALERT_DRIFT_NOT_RUN,),
            description="1 when the latest test for the field rejected 'same distribution as the baseline'.",
            queries=[Query(f"max by ({V}, {F}) ({sel(names.DRIFT_DETECTED, model=False)})", VF_LEGEND)],
        ),
        PanelSpec(
            title="Samples per arm", unit="short", width=12, thresholds=(Step(None, YELLOW), Step(100, "green")),
            description="Observations in the current window and the baseline per version and field.",
            queries=[Query(f"max by ({V}, {F}, {names.ARM}) ({sel(names.DRIFT_SAMPLES, model=False)})",
                           f"{{{{{V}}}}} {{{{{F}}}}} {{{{{names.ARM}}}}}")],
        ),
        PanelSpec(
            title="Baseline in use", kind="table", unit="none", width=24, height=6,
            description="The pinned baseline each version is compared with: baseline model key, content hash and "
                        "embedding model. "
                        "A changed embedder invalidates the baseline.",
            queries=[Query(f"max by ({V}, {names.MODEL}, {names.BASELINE_HASH}, {names.EMBEDDER}) "
                           f"({sel(names.DRIFT_BASELINE_INFO, model=False)})",
                           f"{{{{{V}}}}} {{{{{names.BASELINE_HASH}}}}}", instant=True)],
        ),
    ])


def _refused(title: str, counter: str, description: str) -> PanelSpec:
    """What was not counted, per second by reason (a counter with only a `reason` label)."""
    return PanelSpec(
        title=title, unit="short", width=8, thresholds=(Step(1, ORANGE),), description=description,
        queries=[Query(f"sum by ({names.REASON}) ({rate(counter + '_total', version_label='', model=False)})",
                       f"{{{{{names.REASON}}}}}")])


def _feedback() -> Section:
    events = rate(names.FEEDBACK_EVENTS + "_total", model=False)
    negative = rate(names.FEEDBACK_EVENTS + "_total", model=False, **{names.OUTCOME: "negative"})
    stored = rate(names.SAMPLES_STORED + "_total", model=False)
    return Section("Users' feedback", [
        PanelSpec(
            title="Negative feedback share", unit="percentunit", width=8, min=0, max=1,
            description="Share of the users' feedback events (thumbs, ratings at or under `negative_at_most`, "
                        "regenerates, abandons) that are negative, per version. Feedback is sparse and "
                        "self-selected: read it with the response rate beside it; the canary's `feedback` metric "
                        "compares conversations, not events.",
            queries=[Query(f"sum by ({V}) ({negative}) / sum by ({V}) ({events})", f"{{{{{V}}}}}")],
        ),
        PanelSpec(
            title="Feedback events per sampled answer", unit="percentunit", width=8, min=0,
            description="Feedback events joined to a sampled answer, per stored sample, per version: a version "
                        "whose users answer less often biases its negative share (those who still answer are "
                        "not the same users).",
            queries=[Query(f"sum by ({V}) ({events}) / sum by ({V}) ({stored})", f"{{{{{V}}}}}")],
        ),
        _refused("Feedback events refused", names.FEEDBACK_REJECTED,
                 "Feedback events not counted, per second by reason: unknown_response (no sampled answer with that "
                 "id: sampling too sparse, or the wrong id), late, duplicate, off_scale, flood, invalid, "
                 "store_error."),
    ])


def _tenants() -> Section:
    t = names.TENANT
    vt = f"{V}, {t}"
    legend = f"{{{{{V}}}}} {{{{{t}}}}}"
    requests = rate(names.TENANT_REQUESTS + "_total", model=False)
    errors = rate(names.TENANT_REQUESTS + "_total", model=False, **{names.CODE: "5xx"})
    return Section("Tenants", [
        PanelSpec(
            title="Share of generated tokens per tenant", unit="percentunit", width=12, min=0, max=1,
            thresholds=(Step(0.5, ORANGE),), runbooks=(names.ALERT_NOISY_NEIGHBOUR,),
            description="Each tenant's share of a version's generated tokens (tenants as a bounded label: "
                        "allow-listed and the busiest, the rest `other`). Over half (dashed) while another "
                        "tenant's TTFT doubles is the noisy neighbour.",
            queries=[Query(tenant_token_share(), legend)],
        ),
        PanelSpec(
            title="TTFT p95 per tenant", unit="s", width=12, runbooks=(names.ALERT_NOISY_NEIGHBOUR,),
            description="p95 time to first token per version and tenant (the proxy's first byte, or the mirrored "
                        "samples' TTFT).",
            queries=[Query(f"histogram_quantile(0.95, sum by ({vt}, le) "
                           f"({rate(names.TENANT_TTFT + '_bucket', model=False)}))", legend)],
        ),
        PanelSpec(
            title="Requests per tenant", unit="reqps", width=8,
            description="Requests per second per version and tenant (sampled proxy traffic and mirrored samples).",
            queries=[Query(f"sum by ({vt}) ({requests})", legend)],
        ),
        PanelSpec(
            title="Server errors per tenant", unit="percentunit", width=8, min=0,
            description="Share of a tenant's requests answered 5xx, per version: one tenant's errors can hide in "
                        "the version's average.",
            queries=[Query(f"sum by ({vt}) ({errors}) / sum by ({vt}) ({requests})", legend)],
        ),
        _refused("Tenant labels refused", names.TENANT_OVERFLOW,
                 "Requests whose tenant did not become its label, per second by reason: other (past the label "
                 "cap), untrusted (a tenant header from a peer that is not a trusted gateway), too_long."),
    ])


def dashboard(obj: Objectives) -> DashboardSpec:
    """The quality and drift dashboard."""
    return DashboardSpec(
        slug="quality", title="Quality and drift",
        description="Golden-set pass rates, judge scores and errors, live rule checks, drift per field, the "
                    "users' feedback and the tenants.",
        sections=[_golden(obj), _live(obj), _drift(obj), _feedback(), _tenants()],
    )
