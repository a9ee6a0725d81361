"""OME's canary step gate, emulated for the game day and the tests: a scripted stand-in for the OME controller
(no cluster runs here) that follows its documented evaluation (../shared/reference/rollout-primitives/SOURCES.md
section 6, from OME's promotion.go, querier.go and rollout_types.go) on the RolloutPolicy the observer renders
(observer/render/ome.py):

* each `interval` after `initialDelay`: every check's query, a Go template over {{.Namespace}}, {{.ISVCName}},
  {{.Component}}, {{.CanaryRevision}}, {{.StableRevision}}, {{.CanaryService}}, {{.StableService}} (another
  variable is a template error: inconclusive), runs as an instant query; NaN and ±Inf values are dropped, and
  an empty result is no data: inconclusive, never a breach;
* a check compares its worst series with the threshold (the maximum for LT/LTE, the minimum for GT/GTE); the
  checks of one sample are ANDed, Fail > Inconclusive > Pass;
* a Fail counts toward `failureLimit` (per step; an advance resets it) and rolls back when the count reaches it;
* a Pass advances once the step's `pause.duration` has passed since the step was entered;
* an Inconclusive never counts: `onInconclusive: Rollback` rolls back at once; otherwise the step holds until
  the stall timeout (`readyTimeout`) has passed since the last conclusive sample (or the step's entry), then
  `Hold` parks the canary as Failed with the stable revision serving and `RollbackOnStall` rolls back.

Time is the loop's own clock (one `interval` per sample), so a 14-minute bake runs in as many queries; the
queries go to a real Prometheus at its current time.
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass, field
from typing import Any

import httpx

from observer.config.canary import go_seconds

PASS, FAIL, INCONCLUSIVE = "Pass", "Fail", "Inconclusive"
CANARYING, ADVANCED, ROLLED_BACK, PARKED = "Canarying", "Advanced", "RolledBack", "Failed (held, stable serving)"
_VARIABLE = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")
_OPS = {"LT": lambda v, t: v < t, "LTE": lambda v, t: v <= t, "GT": lambda v, t: v > t, "GTE": lambda v, t: v >= t}


@dataclass
class OmeStepGate:
    """One canary step's analysis, sample by sample."""

    step: dict[str, Any]  # one of the RolloutPolicy's spec.canary.steps
    variables: dict[str, str]  # Namespace, ISVCName, Component, CanaryRevision, StableRevision, ...
    ready_timeout: float | None = None  # seconds; None: a stall never fires
    now: float = 0.0  # seconds since the step was entered
    failed_checks: int = 0
    last_conclusive: float | None = None
    phase: str = CANARYING
    why: str = ""
    log: list[str] = field(default_factory=list)

    @classmethod
    def for_policy(cls, policy: dict[str, Any], *, step: int, canary: str, stable: str,
                   isvc: str = "llm", namespace: str = "llm-serving") -> OmeStepGate:
        canary_spec = policy["spec"]["canary"]
        ready = canary_spec.get("readyTimeout")
        return cls(step=canary_spec["steps"][step], ready_timeout=go_seconds(ready) if ready else None,
                   variables={"Namespace": namespace, "ISVCName": isvc, "Component": "engine",
                              "CanaryRevision": canary, "StableRevision": stable,
                              "CanaryService": f"{isvc}-engine-rev-{canary}",
                              "StableService": f"{isvc}-engine-rev-{stable}"})

    @property
    def analysis(self) -> dict[str, Any]:
        out: dict[str, Any] = self.step["analysis"]
        return out

    def _template(self, query: str) -> str | None:
        unknown = [v for v in _VARIABLE.findall(query) if v not in self.variables]
        if unknown:
            return None
        return _VARIABLE.sub(lambda m: self.variables[m.group(1)], query)

    def check(self, metric: dict[str, Any], prom_url: str) -> tuple[str, float | None]:
        """One check: Pass, Fail or Inconclusive, and the worst value read."""
        query = self._template(metric["query"])
        if query is None:
            return INCONCLUSIVE, None  # a template error
        try:
            r = httpx.get(f"{prom_url}/api/v1/query", params={"query": query}, timeout=10).json()
        except (httpx.HTTPError, ValueError):
            return INCONCLUSIVE, None  # an unreachable source
        if r.get("status") != "success":
            return INCONCLUSIVE, None
        values = [float(s["value"][1]) for s in r["data"]["result"]]
        values = [v for v in values if math.isfinite(v)]
        if not values:
            return INCONCLUSIVE, None  # ErrNoData
        op, threshold = metric["operator"], float(metric["threshold"])
        worst = max(values) if op in ("LT", "LTE") else min(values)
        return (PASS if _OPS[op](worst, threshold) else FAIL), worst

    def sample(self, prom_url: str) -> str:
        """One evaluation (one interval later than the last); the phase after it."""
        if self.phase != CANARYING:
            return self.phase
        interval = go_seconds(self.analysis["interval"])
        self.now += interval
        delay = self.analysis.get("initialDelay")
        if delay and self.now < go_seconds(delay):
            return self.phase
        results = [(m["name"], *self.check(m, prom_url)) for m in self.analysis["metrics"]]
        outcome = FAIL if any(r == FAIL for _, r, _ in results) else \
            INCONCLUSIVE if any(r == INCONCLUSIVE for _, r, _ in results) else PASS
        read = ", ".join(f"{n}={v}" for n, _, v in results)
        self.log.append(f"{self.now:.0f}s: {outcome} ({read})")
        if outcome == FAIL:
            self.last_conclusive = self.now
            self.failed_checks += 1
            if self.failed_checks >= int(self.analysis["failureLimit"]):
                return self._end(ROLLED_BACK, f"{self.failed_checks} failed check(s): {read}")
            return self.phase
        if outcome == PASS:
            self.last_conclusive = self.now
            bake = go_seconds(self.step.get("pause", {}).get("duration", "0s"))
            if self.now >= bake:
                return self._end(ADVANCED, f"passed after the {bake:.0f}s bake: {read}")
            return self.phase
        policy = self.analysis.get("onInconclusive", "Hold")
        if policy == "Rollback":
            return self._end(ROLLED_BACK, f"inconclusive ({read}) with onInconclusive Rollback")
        since = self.last_conclusive if self.last_conclusive is not None else 0.0
        if self.ready_timeout is not None and self.now - since >= self.ready_timeout:
            return self._end(PARKED if policy == "Hold" else ROLLED_BACK,
                             f"no conclusive sample for {self.now - since:.0f}s ({read})")
        return self.phase

    def _end(self, phase: str, why: str) -> str:
        self.phase, self.why = phase, why
        self.log.append(f"{self.now:.0f}s: {phase} ({why})")
        return phase

    def run(self, prom_url: str, *, samples: int) -> str:
        """Up to `samples` evaluations, or until the step ends; a summary line."""
        for _ in range(samples):
            if self.sample(prom_url) != CANARYING:
                break
        return f"{self.phase} after {self.now / 60:.0f} min ({self.why[:80]})" if self.why else \
            f"{self.phase} (held) after {self.now / 60:.0f} min"


def apply_verbs(isvc: dict[str, Any], *, now: str) -> dict[str, Any]:
    """What OME's controller does with the operator verbs on an InferenceService (promotion.go, SOURCES.md section
    6), on a copy, one reconcile: `ome.io/rollout-promote` naming the canary revision advances one step (the
    entry re-stamped `now`, the value recorded in `promotedThrough`, the annotation removed); the record is
    cleared on a later reconcile that sees no annotation carrying it, and until then a promote of that value is
    inert (taken away, nothing advanced); `ome.io/rollout-rollback: "true"` rolls the canary back
    (`rolledBackRevisionHash`, phase RolledBack, the annotation kept). Other values are inert."""
    out = copy.deepcopy(isvc)
    notes = out["metadata"].setdefault("annotations", {})
    engine = out["status"]["components"]["engine"]
    cs = engine.get("canary") or {}
    if notes.get("ome.io/rollout-rollback") == "true" and cs.get("rolledBackRevisionHash") != cs.get(
            "canaryRevisionHash"):
        cs["rolledBackRevisionHash"] = cs.get("canaryRevisionHash")
        engine["rolloutPhase"] = "RolledBack"
        return out
    promote = notes.get("ome.io/rollout-promote")
    if cs.get("promotedThrough"):
        if promote == cs["promotedThrough"]:  # lingering, or written again too soon: taken, not applied
            del notes["ome.io/rollout-promote"]
            return out
        del cs["promotedThrough"]
    if promote is not None and promote == cs.get("canaryRevisionHash"):
        cs["currentStep"] = int(cs.get("currentStep") or 0) + 1
        cs["stepEnteredTime"] = now
        cs["promotedThrough"] = promote
        del notes["ome.io/rollout-promote"]
    return out
