"""The canary held to the SLO objectives: its own bad share against what the SLO allows, beside the relative
tests that compare it with its baseline. Pure: ArmData in, MetricResult out.

Every other metric asks "is the canary worse than the stable?". A canary as slow as a stable that already
breaches its SLO answers no, and passes. This check asks what users of the canary get:

* **never passed over the objective.** The canary's share of bad requests in the window (above the latency
  SLO's threshold, or finished with one of the availability SLO's error reasons) must be at or under the SLO's
  allowance, 1 − objective, for the check to pass. It is read on the point estimate: a canary truly a little
  over the objective can still read under it in a small window, so a fleet with no headroom under its objective
  promotes less often, not more (the figures are in docs/canary.md).
* **failed beyond a margin with enough data.** A one-sided anytime-valid t-test on one-minute slices (the
  slices are the units, as in the relative tests: requests of one slice may go bad together) of "the canary's
  bad share ≤ (1 + margin) × allowance". Fails the canary: users of it are shown to be well out of the SLO.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from observer.analyse import histogram
from observer.analyse.canary import planned, sequential
from observer.analyse.canary.results import ArmData, MetricResult, Outcome
from observer.config.canary import CanarySpec, MetricKind
from observer.config.slo import SLOSpec
from observer.conventions.vllm import latency_id

KIND = "slo"
"""MetricResult.kind of an SLO check (not a configurable metric kind: the checks come from `slo:`)."""

PREFIX = "slo:"
"""The checks' result names: `slo:<SLO name>` (SLO names carry no colon, metric names neither)."""

MIN_SLICES_TO_FAIL = 5
"""Slices with canary requests before the fail test is made (the t-test's least)."""


@dataclass(frozen=True)
class Objective:
    """One SLO as the canary is held to it."""

    slo: str
    """The SLO's name (`slo.latency[].name`, `slo.availability[].name`)."""
    allowed: float
    """The bad share the SLO allows: 1 − objective."""
    family: str | None = None
    """Latency: the histogram (ArmData.histograms key: ttft, itl, e2e, queue); None: availability."""
    threshold_seconds: float = 0.0
    """Latency: a request above this is bad (a bucket edge of the histogram)."""
    error_reasons: tuple[str, ...] = ()
    """Availability: requests finished with one of these are bad."""
    versions: tuple[str, ...] = ()
    """The versions the SLO applies to; empty: every version."""

    @property
    def name(self) -> str:
        return PREFIX + self.slo

    def applies(self, version: str) -> bool:
        return not self.versions or version in self.versions

    def describe(self) -> str:
        if self.family is None:
            return f"finished {'/'.join(self.error_reasons)}"
        return f"{self.family} above {self.threshold_seconds:g} s"


def objectives(slo: SLOSpec, canary: CanarySpec) -> tuple[Objective, ...]:
    """The objectives a canary is held to: every availability SLO, and every engine latency SLO on a histogram
    that a canary latency metric reads (the sources read only those; an SLO on another histogram would be
    nodata for ever and hold every canary). Empty when the check is off or the SLO area is."""
    if not canary.slo_check.enabled or not slo.enabled:
        return ()
    families = _families(canary)
    out = [Objective(slo=s.name, allowed=1.0 - s.objective, family=latency_id(s.histogram),
                     threshold_seconds=s.threshold_seconds, versions=tuple(s.versions))
           for s in slo.latency if s.source == "engine" and latency_id(s.histogram) in families]
    out += [Objective(slo=s.name, allowed=1.0 - s.objective, error_reasons=tuple(s.error_reasons),
                      versions=tuple(s.versions)) for s in slo.availability]
    return tuple(out)


def _families(canary: CanarySpec) -> set[str]:
    return {m.family for m in canary.metrics if m.kind == MetricKind.LATENCY and m.family is not None}


def unread(slo: SLOSpec, canary: CanarySpec) -> list[str]:
    """Engine latency SLOs the check cannot hold the canary to (no canary metric reads their histogram)."""
    if not canary.slo_check.enabled or not slo.enabled:
        return []
    families = _families(canary)
    return [s.name for s in slo.latency if s.source == "engine" and latency_id(s.histogram) not in families]


def bad_and_total(o: Objective, a: ArmData) -> tuple[float, float] | None:
    """(bad requests, requests) of one arm's window or slice under `o`; None without the data."""
    if o.family is None:
        if a.requests is None:
            return None
        total = float(sum(a.requests.values()))
        return float(sum(a.requests.get(r, 0.0) for r in o.error_reasons)), total
    h = a.histograms.get(o.family)
    if h is None or h.count <= 0:
        return None
    try:
        return histogram.fraction_above(h, repr(o.threshold_seconds))
    except KeyError:
        return None


def check(o: Objective, c: ArmData, *, margin: float, alpha: float, beta: float = 0.2,
          plan: planned.PlannedEnd | None = None, critical: bool = True) -> MetricResult:
    """The canary's window against objective `o`: Pass at or under the allowance, Fail when the slices show
    it above (1 + margin) × the allowance at `alpha`, else Inconclusive; Nodata without its counts. With a
    planned end, `alpha` is split as the relative tests split theirs (planned.py): the anytime-valid test at
    every look, a fixed-horizon t-test on the step's slices from the end on; and before that end a pass needs
    the canary shown under the allowance (an anytime-valid bound at the pass side's interim share of `beta`,
    1 − power), at and after it the window's share at or under the allowance."""
    group = "errors" if o.family is None else "latency"
    bound = o.allowed * (1.0 + margin)

    def result(outcome: Outcome, detail: str, **kw: object) -> MetricResult:
        return MetricResult(name=o.name, kind=KIND, outcome=outcome, critical=critical, advisory=False,
                            group=group, baseline=o.allowed, detail=detail, **kw)  # type: ignore[arg-type]

    counts = bad_and_total(o, c)
    if counts is None or counts[1] <= 0:
        why = "no requests" if o.family is None else f"no {o.family} observations with an edge at " \
                                                     f"{o.threshold_seconds:g} s"
        return result(Outcome.NODATA, f"{o.describe()}: {why} in the canary's window")
    bad, total = counts
    share = bad / total
    head = (f"{o.describe()}: canary {share:.3%} of {round(total)} against the SLO's {o.allowed:.3%} "
            f"(objective {1.0 - o.allowed:.4g})")
    rows = [r for r in (bad_and_total(o, s) for s in c.slices) if r is not None and r[1] > 0]
    x = np.array([r[0] for r in rows], dtype=float)
    n = np.array([r[1] for r in rows], dtype=float)
    p_value, slices = None, None
    if len(rows) >= MIN_SLICES_TO_FAIL:
        # Excess bad requests over the fail bound, per slice; a slice's size its weight (sequential.t_sequence).
        a_any, a_end = (alpha, 0.0) if plan is None else plan.split(alpha)
        p_value, _, reject = sequential.t_sequence(x - bound * n, alpha=a_any, sizes=n / n.mean())
        if not reject and plan is not None and plan.reached and len(rows) >= plan.slices:
            k = plan.slices
            end = planned.final_t(x[:k] - bound * n[:k], n[:k], alpha=a_end)
            p_value, reject = min(p_value, end.p_value), end.reject
        slices = len(rows)
        if reject:
            return result(Outcome.FAIL, f"{head}: above {bound:.3%} ((1 + {margin:g}) × the allowance) over "
                                        f"{slices} slices", canary=share, n_canary=round(total), p_value=p_value,
                          slices=slices)
    kw = {"canary": share, "n_canary": round(total), "p_value": p_value, "slices": slices}
    if share > o.allowed:
        return result(Outcome.INCONCLUSIVE, f"{head}: over the objective, never passed"
                      + ("" if slices is not None else f" (fewer than {MIN_SLICES_TO_FAIL} slices to fail on)"),
                      **kw)
    if plan is None or plan.reached:
        return result(Outcome.PASS, head, **kw)
    # Before the planned end, under the allowance on this look's window is not enough: a canary truly over
    # it reads under it now and then, and the gate looks every minute. Early, it must be shown under it.
    if len(rows) >= MIN_SLICES_TO_FAIL:
        _, _, shown = sequential.t_sequence(o.allowed * n - x, alpha=plan.split_pass(beta)[0], sizes=n / n.mean(),
                                            restart_every=None)
        if shown:
            return result(Outcome.PASS, f"{head}: shown under it before the step's end", **kw)
    return result(Outcome.INCONCLUSIVE, f"{head}: under the objective so far, not shown under it yet (decided "
                                        f"on the window's share at the step's planned end)", **kw)


def alpha(spec: CanarySpec) -> float:
    """Each check's fail α: a critical metric's share of the step's budget (judge.metric_alpha). Its null is a
    canary at (1 + margin) × the allowance; a canary at the objective, or under it, fails far less often."""
    critical = [m for m in spec.metrics if m.critical and not m.advisory]
    return spec.alpha / max(len(critical), 1)


def checks(objs: Sequence[Objective], canary: str, c: ArmData, *, margin: float, alpha: float, beta: float,
           plan: planned.PlannedEnd | None) -> list[MetricResult]:
    """The canary's results against every objective that applies to it."""
    return [check(o, c, margin=margin, alpha=alpha, beta=beta, plan=plan) for o in objs if o.applies(canary)]
