"""Actor mode: the observer moves a rollout source itself, by writing the source's own promote and rollback.

Opt-in per model (`primitive.act: true`), for the rows that have such a verb (observer.config.sources, gate
`act`): OME's InferenceService canary. OME reads two annotations (SOURCES.md section 6, promotion.go):
`ome.io/rollout-promote=<canaryRevisionHash>` advances the current step once (OME records the hash in
`promotedThrough` and removes the annotation after the advance is stored), and `ome.io/rollout-rollback=true`
returns every instance to the stable revision (it stays until a new canary starts).

Each look, per model, the actor reads the object from discovery's cache and asks the judge for the current
step's verdict (the window from `stepEnteredTime`, the planned end the step's `pause.duration`, else
`canary.step_seconds`):

* `fail` → rollback, written once;
* `pass`, once the step's bake has passed since it was entered → promote, once per step (not while the hash
  is already on the object or in `promotedThrough`);
* anything else → nothing: OME's own gate, if the step has one, still runs, and a held canary stays held.

Only a step that is serving is acted on (`rolloutPhase` Canarying, or Paused at a manual gate), never one an
operator froze (`ome.io/rollout-paused`). The patch is a JSON merge patch carrying the object's
resourceVersion, so a write never lands on a state newer than the one judged (409: judged again next look).
Without the `patch` verb the API answers 403: that is counted, logged once with the RBAC rule to grant, and
the model is not written to again for `FORBIDDEN_PAUSE_SECONDS`, so a missing rule is no retry storm.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from observer.config.canary import go_seconds
from observer.config.discovery import ModelDiscovery
from observer.discover.kubeapi import Reflector
from observer.discover.model import _dict, _list, _timestamp
from observer.discover.planned import resources
from observer.discover.primitives import _str
from observer.discover.revisions import OME_COMPONENT

log = logging.getLogger("observer.discovery")

PROMOTE = "ome.io/rollout-promote"
ROLLBACK = "ome.io/rollout-rollback"
PAUSED = "ome.io/rollout-paused"
ACTING_PHASES = frozenset({"Canarying", "Paused"})
FORBIDDEN_PAUSE_SECONDS = 600.0
ERROR_BACKOFF_SECONDS = (5.0, 300.0)  # first and longest wait after an API error other than 403


class StepJudge(Protocol):
    """The verdict of `canary` against `baseline` for a step entered at `since` (Unix seconds) and planned to
    last `step_seconds`: the outcome (`pass`, `fail`, `inconclusive`, `nodata`, `idle`) and its reason."""

    async def __call__(self, canary: str, baseline: str, *, since: float,
                       step_seconds: float | None) -> tuple[str, str]: ...


@dataclass(frozen=True)
class OmeStep:
    """The canary step an OME InferenceService is on, as its engine's status says."""

    name: str
    api_version: str
    resource_version: str
    phase: str
    canary: str
    stable: str
    step: int
    entered: float | None  # stepEnteredTime, Unix seconds
    bake: float | None  # the step's pause.duration in the object's own canary (None: a policyRef, or no pause)
    promoted_through: str
    annotations: Mapping[str, str]


def ome_step(obj: Mapping[str, Any]) -> OmeStep | None:
    """The step an OME InferenceService's engine is on, or None while no canary is in flight."""
    meta = _dict(obj, "metadata")
    component = _dict(_dict(_dict(obj, "status"), "components"), OME_COMPONENT)
    cs = _dict(component, "canary")
    canary, stable = _str(cs, "canaryRevisionHash"), _str(cs, "stableRevisionHash")
    if canary is None or stable is None or canary == stable:
        return None
    step = cs.get("currentStep")
    step = step if isinstance(step, int) else 0
    bake = None
    for group in _list(_dict(obj, "spec").get("rollout"), "groups"):
        components = _list(group, "components")
        if components and OME_COMPONENT not in components:
            continue
        steps = _list(_dict(group, "canary"), "steps")
        if 0 <= step < len(steps):
            duration = _str(_dict(steps[step], "pause"), "duration")
            try:
                bake = go_seconds(duration) if duration else None
            except ValueError:
                bake = None
        break
    notes = {str(k): str(v) for k, v in _dict(meta, "annotations").items()}
    return OmeStep(name=_str(meta, "name") or "?", api_version=_str(obj, "apiVersion") or "ome.io/v1beta1",
                   resource_version=_str(meta, "resourceVersion") or "", phase=_str(component, "rolloutPhase") or "",
                   canary=canary, stable=stable, step=step, entered=_timestamp(cs.get("stepEnteredTime")), bake=bake,
                   promoted_through=_str(cs, "promotedThrough") or "", annotations=notes)


def decide(s: OmeStep, outcome: str, *, now: float, bake: float) -> tuple[str, str] | None:
    """(annotation, value) to write for a step and its verdict, or None."""
    if s.phase not in ACTING_PHASES or s.entered is None:
        return None
    if outcome == "fail":
        return None if s.annotations.get(ROLLBACK) == "true" else (ROLLBACK, "true")
    if outcome != "pass" or now - s.entered < bake or s.annotations.get(PAUSED) in ("true", "freeze"):
        return None
    if s.canary in (s.annotations.get(PROMOTE), s.promoted_through) or s.annotations.get(ROLLBACK) == "true":
        return None
    return PROMOTE, s.canary


@dataclass
class _Backoff:
    until: float
    wait: float


class RolloutActor:
    """Writes promote/rollback on the objects of the models with `primitive.act`, from the judge's verdicts."""

    def __init__(self, client: httpx.AsyncClient, *, namespace: str, models: Sequence[ModelDiscovery],
                 collections: Mapping[tuple[str, str], Reflector], judge: StepJudge, step_seconds: float | None,
                 clock: Callable[[], float]) -> None:
        self.client = client
        self.namespace = namespace
        self.models = [m for m in models if m.primitive is not None and m.primitive.act]
        self.collections = collections
        self.judge = judge
        self.step_seconds = step_seconds
        self.clock = clock
        self.actions: Counter[tuple[str, str, str]] = Counter()  # (group, action, result) → count
        self.last_error: dict[str, str] = {}
        self._backoff: dict[str, _Backoff] = {}

    def _object(self, m: ModelDiscovery) -> Mapping[str, Any] | None:
        assert m.primitive is not None
        r = self.collections.get(resources(m.primitive)[0])  # the source's own collection comes first
        return r.objects.get(m.primitive.name) if r is not None and r.synced else None

    async def run_once(self) -> None:
        """One look at every acting model (the periodic job)."""
        for m in self.models:
            b = self._backoff.get(m.name)
            if b is not None and self.clock() < b.until:
                continue
            obj = self._object(m)
            step = None if obj is None else ome_step(obj)
            if step is None or step.phase not in ACTING_PHASES or step.entered is None:
                continue
            bake = step.bake if step.bake is not None else (self.step_seconds or 0.0)
            outcome, reason = await self.judge(f"{m.version_prefix}{step.canary}", f"{m.version_prefix}{step.stable}",
                                               since=step.entered, step_seconds=bake or None)
            write = decide(step, outcome, now=self.clock(), bake=bake)
            if write is not None:
                await self._write(m, step, write, reason)

    async def _write(self, m: ModelDiscovery, s: OmeStep, write: tuple[str, str], reason: str) -> None:
        key, value = write
        action = "rollback" if key == ROLLBACK else "promote"
        assert m.primitive is not None and m.primitive.source.own is not None  # a row that acts owns its object
        plural = m.primitive.source.own.plural
        path = (f"/apis/{s.api_version}/namespaces/{quote(self.namespace, safe='')}/{plural}/"
                f"{quote(s.name, safe='')}")
        body = {"metadata": {"resourceVersion": s.resource_version, "annotations": {key: value}}}
        what = f"OME InferenceService {s.name} in {self.namespace}"
        try:
            r = await self.client.patch(path, content=json.dumps(body),
                                        headers={"Content-Type": "application/merge-patch+json"})
        except httpx.HTTPError as e:
            return self._failed(m, action, "unreachable", f"{action} {what}: the API server is unreachable: "
                                                          f"{type(e).__name__}: {e}")
        if r.status_code == 200:
            self.actions[(m.name, action, "written")] += 1
            self._backoff.pop(m.name, None)
            self.last_error.pop(m.name, None)
            log.warning("actor mode: %s: canary %s step %d: wrote %s=%s (%s)", what, s.canary, s.step, key, value,
                        reason)
            return None
        if r.status_code == 409:  # the object moved since it was read: judged again on the next look
            self.actions[(m.name, action, "conflict")] += 1
            return None
        if r.status_code == 403:
            group = s.api_version.rpartition("/")[0]
            self.actions[(m.name, action, "forbidden")] += 1
            message = (f"actor mode: forbidden to patch {plural}.{group} {s.name} in namespace {self.namespace}, so "
                       f"the {action} of canary {s.canary} was not written. Grant the observer's service account the "
                       f"rule {{apiGroups: [{group}], resources: [{plural}], verbs: [patch]}} (the chart adds it "
                       f"to its discovery Role when the model's primitive.act is true), or set primitive.act: false "
                       f"to leave the step to OME's own gate. Not tried again for {FORBIDDEN_PAUSE_SECONDS:.0f} s. "
                       f"API: {r.text[:200]}")
            if self.last_error.get(m.name) != message:
                log.error("%s", message)
            self.last_error[m.name] = message
            self._backoff[m.name] = _Backoff(self.clock() + FORBIDDEN_PAUSE_SECONDS, FORBIDDEN_PAUSE_SECONDS)
            return None
        return self._failed(m, action, "not_found" if r.status_code == 404 else "http_error",
                            f"{action} {what}: HTTP {r.status_code}: {r.text[:200]}")

    def _failed(self, m: ModelDiscovery, action: str, result: str, message: str) -> None:
        self.actions[(m.name, action, result)] += 1
        first, longest = ERROR_BACKOFF_SECONDS
        before = self._backoff.get(m.name)
        wait = first if before is None else min(2 * before.wait, longest)
        self._backoff[m.name] = _Backoff(self.clock() + wait, wait)
        if self.last_error.get(m.name) != message:
            log.warning("actor mode: %s; not tried again for %.0f s", message, wait)
        self.last_error[m.name] = message
