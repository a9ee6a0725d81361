"""Kubernetes discovery: reflectors on pods, the rollout sources' objects and autoscalers → the live fleet.

Every change recomputes the discovered versions (debounced) and replaces them in the LiveFleet, which
re-binds the scrape targets and is what the canary judge pairs and weighs from. A version whose last pod
went away stays (no targets, its counts frozen) for `remove_after_seconds`, then is dropped and its series
end. Readiness waits until every pod reflector and every rollout source's reflector has listed once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import httpx

from observer.config.discovery import KubernetesDiscovery
from observer.config.fleet import VersionSpec
from observer.discover import primitives
from observer.discover.autoscaling import autoscaler_states
from observer.discover.kubeapi import Reflector
from observer.discover.model import (
    FIXES,
    ModelState,
    PodInfo,
    RolloutInfo,
    build_state,
    dcgm_by_node,
    model_state,
    parse_all,
)
from observer.discover.planned import claimed_twice, plan_for, resources
from observer.discover.rollback import RollbackWindows
from observer.fleetview import LiveFleet

log = logging.getLogger("observer.discovery")
SOURCE = "kubernetes"


@dataclass
class Discovery:
    """The reflectors' caches → the live fleet: a publisher task recomputes the versions after each change
    (debounced) and when a departed version's grace runs out."""

    spec: KubernetesDiscovery
    fleet: LiveFleet
    client: httpx.AsyncClient
    pods: dict[str, Reflector]  # model → its pods
    rollouts: Reflector | None = None
    dcgm: Reflector | None = None
    autoscalers: list[Reflector] = field(default_factory=list)
    primitives: dict[tuple[str, str], Reflector] = field(default_factory=dict)  # (apiVersion, plural) → its objects
    clock: Callable[[], float] = time.monotonic
    problems: Counter[tuple[str, str]] = field(default_factory=Counter)  # (group, problem) → count
    states: dict[str, ModelState] = field(default_factory=dict)
    debounce_seconds: float = 0.05
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _gone: dict[str, tuple[VersionSpec, float]] = field(default_factory=dict)
    _published: dict[str, VersionSpec] = field(default_factory=dict)
    _seen_problems: dict[str, Counter[str]] = field(default_factory=dict)
    _seen_details: dict[str, set[str]] = field(default_factory=dict)
    rollback: RollbackWindows = field(init=False)

    def __post_init__(self) -> None:
        self.rollback = RollbackWindows(self.clock)
        for r in self.reflectors():
            r.on_change = self._notify

    def _notify(self) -> None:
        self._changed.set()

    def reflectors(self) -> list[Reflector]:
        out = list(self.pods.values())
        out += [r for r in (self.rollouts, self.dcgm) if r is not None]
        return out + self.autoscalers + list(self.primitives.values())

    def not_ready(self) -> str | None:
        waiting = [r for r in (*self.pods.values(), self.rollouts, *self.primitives.values())
                   if r is not None and not r.synced]
        if not waiting:
            return None
        what = ", ".join(f"{r.resource} ({r.last_error or 'listing'})" for r in waiting)
        return f"kubernetes discovery has not listed yet: {what}"

    async def start(self) -> None:
        self._changed = asyncio.Event()  # of the loop that runs the service
        for r in self.reflectors():
            self._tasks.append(asyncio.create_task(r.run(), name=f"discovery {r.resource}"))
        self._tasks.append(asyncio.create_task(self._publisher(), name="discovery publisher"))

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._tasks.clear()
        await self.client.aclose()

    async def _publisher(self) -> None:
        while True:
            wait = min((since + self._grace() - self.clock() for _, since in self._gone.values()), default=None)
            try:
                await asyncio.wait_for(self._changed.wait(), timeout=None if wait is None else max(wait, 0.01))
                await asyncio.sleep(self.debounce_seconds)
            except TimeoutError:
                pass
            self._changed.clear()
            try:
                self.publish()
            except Exception:  # a bug in one recompute must not end discovery
                log.exception("kubernetes discovery: recomputing the versions failed; keeping the last ones")

    def _grace(self) -> float:
        return self.spec.remove_after_seconds

    def publish(self) -> list[VersionSpec]:
        """Recompute the versions from the reflectors' caches and hand them to the fleet."""
        spec = self.spec
        scratch: Counter[str] = Counter()
        rollouts: dict[str, RolloutInfo] = {}
        if self.rollouts is not None:
            rollouts = {r.name: r for r in parse_all(self.rollouts.objects.values(), scratch, "rollout")}
        dcgm = dcgm_by_node(spec.dcgm, parse_all(self.dcgm.objects.values(), scratch, "pod") if self.dcgm else [])
        autoscalers = [o for r in self.autoscalers for o in r.objects.values()]
        objects = {key: list(r.objects.values()) for key, r in self.primitives.items()}
        states: dict[str, ModelState] = {}
        problems: dict[str, Counter[str]] = {}
        for m in spec.models:
            reflector = self.pods.get(m.name)
            if reflector is None:
                continue
            problems[m.name] = Counter()
            pods: list[PodInfo] = parse_all(reflector.objects.values(), problems[m.name], "pod")
            if m.primitive is not None:
                if not reflector.synced or not all(self.primitives[key].synced for key in resources(m.primitive)
                                                   if key in self.primitives):
                    # Not listed yet: an HTTPRoute read before its pools would name a dangling pool, an OME
                    # status read before the pods a revision without pods.
                    if m.name in self.states:
                        states[m.name] = self.states[m.name]
                    continue
                plan = plan_for(m.primitive, objects, pods)
                for line in plan.details:
                    self._detail(m.name, line)
                states[m.name] = build_state(spec, m, pods, plan, dcgm, problems[m.name])
            else:
                rollout = rollouts.get(m.rollout) if m.rollout else None
                state = model_state(spec, m, pods, rollout, dcgm, problems[m.name], autoscalers)
                scaling = autoscaler_states(rollout, autoscalers, problems[m.name])
                held = self.rollback.observe(m.name, rollout, pods, m.identity_label, m.version_prefix)
                # The previous version's pods inside its scale-down delay are kept on purpose, not stale.
                states[m.name] = replace(state, autoscalers=scaling,
                                         stale_revision_pods=max(0, state.stale_revision_pods - held))
        conflicts = claimed_twice(states, [m.name for m in spec.models if m.primitive is not None])
        found: list[VersionSpec] = []
        for group, state in states.items():
            if group in conflicts:  # both claimants are left out until one lets go
                problems[group]["claimed_twice"] += len(conflicts[group])
                self._detail(group, f"claimed_twice: {', '.join(sorted(conflicts[group]))} share pods or a model "
                                    f"name with another model's versions")
                kept_versions = tuple(v for v in state.versions if v.name not in conflicts[group])
                state = replace(state, versions=kept_versions)
            self._count_problems(group, problems[group])
            self.states[group] = state
            found.extend(state.versions)
        now = self.clock()
        names_now = {v.name for v in found}
        for name, v in self._published.items():
            if name not in names_now and name not in self._gone:
                log.info("version %s: no serving pod left; its series end in %.0fs unless one comes back",
                         name, spec.remove_after_seconds)
                self._gone[name] = (v.model_copy(update={"vllm": [], "dcgm": [], "pods": [], "openai": None}), now)
        for name in list(self._gone):
            if name in names_now or now - self._gone[name][1] >= spec.remove_after_seconds:
                if name not in names_now:
                    log.info("version %s removed: no serving pod for %.0fs", name, spec.remove_after_seconds)
                del self._gone[name]
        kept = found + [v for v, _ in self._gone.values()]
        self._published = {v.name: v for v in kept}
        changed = self.fleet.replace(SOURCE, kept)
        if self.fleet.shadowed:
            scratch["duplicate_identity"] = len(self.fleet.shadowed)
            if changed:
                log.warning("kubernetes discovery: version(s) %s also configured in fleet.versions; the "
                            "configured one is watched, the discovered one ignored",
                            ", ".join(sorted(self.fleet.shadowed)))
        self._count_problems("", scratch)  # problems of no one model: dcgm pods, rollouts, duplicates
        if changed:
            log.info("kubernetes discovery: %s", ", ".join(f"{v.name} ({v.role}, {len(v.vllm)} pod(s)"
                                                           + (f", weight {v.expected_traffic_weight:g}"
                                                              if v.expected_traffic_weight is not None else "")
                                                           + ")" for v in kept) or "no versions")
        return kept

    def _detail(self, group: str, line: str) -> None:
        """A primitive's problem in words, logged when it is new (the counter says how often)."""
        seen = self._seen_details.setdefault(group, set())
        if line not in seen:
            if len(seen) < 64:  # bounded: a flapping object must not grow it without end
                seen.add(line)
            log.warning("kubernetes discovery (%s): %s", group, line)

    def _count_problems(self, group: str, problems: Counter[str]) -> None:
        """Problems are recounted on every recompute; count each (group, problem) once per new occurrence."""
        before = self._seen_problems.get(group, Counter())
        for problem, n in problems.items():
            if n > before.get(problem, 0):
                self.problems[(group, problem)] += n - before.get(problem, 0)
                log.warning("kubernetes discovery%s: %d pod(s)/object(s)/version(s): %s%s",
                            f" ({group})" if group else "", n, problem.replace("_", " "),
                            f": {FIXES[problem]}" if problem in FIXES else
                            f": {primitives.FIXES[problem]}" if problem in primitives.FIXES else "")
        self._seen_problems[group] = problems
