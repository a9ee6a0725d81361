"""`GET /api/v1/canary/verdict`: strict JSON (no NaN/Infinity), under 2 KB, always 200 with a verdict.

Argo Rollouts' web provider (≤ v1.9.x) marks a body that is not valid JSON as Successful without
evaluating its conditions, so the body is encoded by observer.jsonsafe (never NaN) and shrunk, never truncated
mid-token, to stay small. Only a fault of the judge itself (an exception) gives a non-2xx answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query, Response

from observer import jsonsafe
from observer.analyse.canary.judge import MetricResult, Outcome, Verdict
from observer.jsonsafe import finite

MAX_BYTES = 2000
MAX_REASON = 300
WHY_CHARS = 160
"""A nodata critical metric's `why`: the judge's detail, cut."""
GATE_REASON = 160
"""The reason's length in `gate`, the object Argo's web metric stores as its measurement's value."""


class VerdictProvider(Protocol):
    """What the router needs from the canary service."""

    async def verdict_for(self, canary: str | None, baseline: str | None, *, since: float | None,
                          weight: str | None, step_seconds: float | None = None) -> Verdict: ...


def _num(x: float | None) -> float | None:
    f = finite(x)
    return None if f is None else float(f"{f:.4g}")


def _metric(r: MetricResult, *, full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"result": str(r.outcome)}
    if r.critical:
        out["critical"] = True
    if r.advisory:
        out["advisory"] = True
    if r.outcome is Outcome.NODATA and r.critical and r.detail:  # a gate's missing fact: say which and why
        out["why"] = r.detail[:WHY_CHARS]
    if not full:
        return out
    for key, value in (("canary", r.canary), ("baseline", r.baseline), ("ratio", r.ratio), ("p", r.p_value)):
        v = _num(value)
        if v is not None:
            out[key] = v
    if r.ci_low is not None and r.ci_high is not None:
        out["ci"] = [_num(r.ci_low), _num(r.ci_high)]
    if r.n_canary or r.n_baseline:
        out["n"] = [r.n_canary, r.n_baseline]
    if r.min_n is not None:
        out["min_n"] = r.min_n
    if r.evidence is not None:
        out["evidence"] = dict(r.evidence)
    return out


def verdict_body(v: Verdict, *, full: bool = True, report: str | None = None) -> dict[str, Any]:
    """The JSON-ready summary of a verdict; `report`: the pair's report page, where a person looks next.

    `gate` repeats the verdict with its one-line reason and the report URL: Argo's web provider stores the
    value its JSONPath selects as the measurement's value, so a gate reading `{$.gate}` shows why and where
    to look in the AnalysisRun (`kubectl argo rollouts get`, the UI), not a bare `fail`."""
    gate: dict[str, Any] = {"verdict": str(v.verdict), "critical_failed": v.critical_failed,
                            "reason": v.reason.splitlines()[0][:GATE_REASON] if v.reason else ""}
    if report:
        gate["report"] = report
    return {
        **({"report": report} if report else {}),
        "gate": gate,
        "canary": v.canary,
        "baseline": v.baseline,
        "verdict": str(v.verdict),
        "score": _num(v.score) or 0.0,
        "critical_failed": v.critical_failed,
        "n": {"canary": v.n_canary, "baseline": v.n_baseline},
        "split": {"ok": v.split_ok, "observed": _num(v.canary_share), "expected": _num(v.expected_share)},
        "metrics": {r.name: _metric(r, full=full) for r in v.metrics},
        "reason": v.reason[:MAX_REASON],
        "evaluated_at": round(v.evaluated_at, 3),
        "window_seconds": _num(v.window_seconds),
        **({"looks": v.looks} if v.looks else {}),
        **({"judge": dict(v.judge)} if v.judge else {}),
    }


def _dumps(body: dict[str, Any]) -> bytes:
    return jsonsafe.dumps(body, separators=(",", ":")).encode()


def encode(v: Verdict, *, report: str | None = None) -> bytes:
    """Strict JSON of `v` under MAX_BYTES: per-metric numbers go first, then the least important metrics
    (nodata, then passes; failures and critical metrics are kept longest), noted in `metrics_omitted`."""
    data = _dumps(verdict_body(v, report=report))
    if len(data) <= MAX_BYTES:
        return data
    body = verdict_body(v, full=False, report=report)
    data = _dumps(body)
    if len(data) <= MAX_BYTES:
        return data
    body["reason"] = body["reason"][:120]
    rank = {"fail": 0, "inconclusive": 2, "pass": 3, "nodata": 4, "idle": 4}
    ordered = sorted(v.metrics, key=lambda r: (rank[str(r.outcome)] - (1 if r.critical else 0), r.name))
    body["metrics"] = {}
    body["metrics_omitted"] = len(ordered)
    for r in ordered:
        body["metrics"][r.name] = _metric(r, full=False)
        body["metrics_omitted"] -= 1
        if len(_dumps(body)) > MAX_BYTES:
            del body["metrics"][r.name]
            body["metrics_omitted"] += 1
            break
    return _dumps(body)


def router(provider: VerdictProvider, *, report_url: Callable[[str, str], str] | None = None) -> APIRouter:
    """The canary API router; with `report_url`, each verdict names its pair's report page."""
    r = APIRouter(prefix="/api/v1/canary", tags=["canary"])

    @r.get("/verdict")
    async def verdict(
        canary: Annotated[str | None, Query(max_length=63, description="Canary version name, or the role: "
                                                         "`canary`, `GROUP:canary` (discovered versions).")] = None,
        baseline: Annotated[str | None, Query(max_length=63, description="Baseline version name, or the role: "
                                                           "`stable`, `GROUP:stable`.")] = None,
        since: Annotated[float | None, Query(ge=0, description="Unix time the analysis started; the window "
                                                               "is capped at canary.window_seconds.")] = None,
        weight: Annotated[str | None, Query(max_length=20, description="Expected canary traffic share: 0.05, "
                                             "or an Argo percentage (5); `any` skips the split check; "
                                             "empty: from the config.")] = None,
        step_seconds: Annotated[float | None, Query(gt=0, le=86_400, description=(
            "The analysis step's planned length from its start (`since`; without it, this observer's first ask "
            "of the step): the sliced tests spend most of their α at that end. Absent: canary.step_seconds, "
            "else anytime-valid tests."))] = None,
    ) -> Response:
        """Judge the canary against the baseline now: pass | fail | inconclusive | nodata (always 200)."""
        v = await provider.verdict_for(canary, baseline, since=since, weight=weight, step_seconds=step_seconds)
        report = report_url(v.canary, v.baseline) if report_url is not None and v.canary and v.baseline else None
        return Response(encode(v, report=report), media_type="application/json")

    return r
