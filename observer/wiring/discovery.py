"""Wiring of Kubernetes discovery: reflectors on pods, Rollouts and autoscalers → the live fleet.

One pod reflector per configured model (its label selector, server-side), one on the namespace's
Argo Rollouts (when a model names one), one on dcgm-exporter pods, and two on autoscalers (HPA,
KEDA ScaledObject) for the rollout-hygiene gauges. Every change recomputes the discovered versions
(debounced) and replaces them in the context's LiveFleet, which re-binds the scrape targets and is
what the canary judge pairs and weighs from. A version whose last pod went away stays (no targets,
its counts frozen) for `remove_after_seconds`, then is dropped and its series end.

Readiness: /readyz answers 503 with the reason until every pod reflector (and the Rollout one) has
listed once — `observer serve` starts anyway, so an API server that is down at start is an error you
can read, not a crash loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.config.discovery import KubernetesDiscovery
from observer.config.fleet import VersionSpec
from observer.discover.kubeapi import Reflector, api_client
from observer.discover.model import ModelState, PodInfo, RolloutInfo, dcgm_by_node, model_state, parse_all
from observer.errors import ConfigError
from observer.fleetview import LiveFleet
from observer.wiring.runtime import BaseComponent, Clock, Context

log = logging.getLogger("observer.discovery")
SOURCE = "kubernetes"


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


@dataclass
class DiscoveryComponent(BaseComponent):
    """Kubernetes discovery in the running service."""

    name: str = "discovery"
    spec: KubernetesDiscovery | None = None
    fleet: LiveFleet | None = None
    client: httpx.AsyncClient | None = None
    clock: Clock = time.monotonic
    pods: dict[str, Reflector] = field(default_factory=dict)          # model → its pods
    rollouts: Reflector | None = None
    dcgm: Reflector | None = None
    autoscalers: list[Reflector] = field(default_factory=list)
    problems: Counter[tuple[str, str]] = field(default_factory=Counter)  # (group, problem) → count
    states: dict[str, ModelState] = field(default_factory=dict)
    debounce_seconds: float = 0.05
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _gone: dict[str, tuple[VersionSpec, float]] = field(default_factory=dict)
    _published: dict[str, VersionSpec] = field(default_factory=dict)
    _seen_problems: dict[str, Counter[str]] = field(default_factory=dict)

    def reflectors(self) -> list[Reflector]:
        out = list(self.pods.values())
        out += [r for r in (self.rollouts, self.dcgm) if r is not None]
        return out + self.autoscalers

    def not_ready(self) -> str | None:
        waiting = [r for r in (*self.pods.values(), self.rollouts) if r is not None and not r.synced]
        if not waiting:
            return None
        what = ", ".join(f"{r.resource} ({r.last_error or 'listing'})" for r in waiting)
        return f"kubernetes discovery has not listed yet: {what}"

    def collectors(self) -> Sequence[Collector]:
        return (DiscoveryCollector(self),)

    def _notify(self) -> None:
        self._changed.set()

    async def start(self) -> None:
        self._changed = asyncio.Event()
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
        if self.client is not None:
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
        assert self.spec is not None
        return self.spec.remove_after_seconds

    def publish(self) -> list[VersionSpec]:
        """Recompute the versions from the reflectors' caches and hand them to the fleet."""
        assert self.spec is not None and self.fleet is not None
        spec = self.spec
        scratch: Counter[str] = Counter()
        rollouts: dict[str, RolloutInfo] = {}
        if self.rollouts is not None:
            rollouts = {r.name: r for r in parse_all(self.rollouts.objects.values(), scratch, "rollout")}
        dcgm = dcgm_by_node(spec.dcgm, parse_all(self.dcgm.objects.values(), scratch, "pod") if self.dcgm else [])
        autoscalers = [o for r in self.autoscalers for o in r.objects.values()]
        found: list[VersionSpec] = []
        for m in spec.models:
            reflector = self.pods.get(m.name)
            if reflector is None:
                continue
            problems: Counter[str] = Counter()
            pods: list[PodInfo] = parse_all(reflector.objects.values(), problems, "pod")
            rollout = rollouts.get(m.rollout) if m.rollout else None
            state = model_state(spec, m, pods, rollout, dcgm, problems, autoscalers)
            self._count_problems(m.name, problems)
            self.states[m.name] = state
            found.extend(state.versions)
        now = self.clock()
        names_now = {v.name for v in found}
        for name, v in self._published.items():
            if name not in names_now and name not in self._gone:
                log.info("version %s: no serving pod left; its series end in %.0fs unless one comes back",
                         name, spec.remove_after_seconds)
                self._gone[name] = (v.model_copy(update={"vllm": [], "dcgm": [], "pods": []}), now)
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

    def _count_problems(self, group: str, problems: Counter[str]) -> None:
        """Problems are recounted on every recompute; count each (group, problem) once per new occurrence."""
        before = self._seen_problems.get(group, Counter())
        for problem, n in problems.items():
            if n > before.get(problem, 0):
                self.problems[(group, problem)] += n - before.get(problem, 0)
                log.warning("kubernetes discovery%s: %d pod(s)/rollout(s) skipped: %s", f" ({group})" if group else "",
                            n, problem.replace("_", " "))
        self._seen_problems[group] = problems



class DiscoveryCollector(Collector):
    """observer_discovery_* and observer_rollout_* from the component's state at each scrape."""

    def __init__(self, component: DiscoveryComponent) -> None:
        self.c = component

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        c = self.c
        synced = GaugeMetricFamily(names.DISCOVERY_SYNCED, "1 once the collection was listed, 0 before.",
                                   labels=[names.RESOURCE])
        errors = CounterMetricFamily(names.DISCOVERY_ERRORS, "Kubernetes API errors by reason (the last good "
                                     "state is kept).", labels=[names.RESOURCE, names.REASON])
        relists = CounterMetricFamily(names.DISCOVERY_RELISTS, "Full lists by why: start, gone (410), resync, "
                                      "error.", labels=[names.RESOURCE, names.REASON])
        events = CounterMetricFamily(names.DISCOVERY_EVENTS, "Watch events by type.",
                                     labels=[names.RESOURCE, "type"])
        for r in c.reflectors():
            synced.add_metric([r.resource], 1.0 if r.synced else 0.0)
            for reason, n in sorted(r.stats.errors.items()):
                errors.add_metric([r.resource, reason], n)
            for reason, n in sorted(r.stats.relists.items()):
                relists.add_metric([r.resource, reason], n)
            for kind, n in sorted(r.stats.events.items()):
                events.add_metric([r.resource, kind], n)
        yield from (synced, errors, relists, events)
        problems = CounterMetricFamily(names.DISCOVERY_PROBLEMS, "Pods or Rollouts discovery skipped, by "
                                       "problem (no_ip, no_identity, invalid_identity, pods_over_cap, ...).",
                                       labels=[names.GROUP, names.PROBLEM])
        for (group, problem), n in sorted(c.problems.items()):
            problems.add_metric([group, problem], n)
        yield problems
        assert c.fleet is not None
        role = GaugeMetricFamily(names.VERSION_ROLE, "The role each watched version has now (value 1).",
                                 labels=[names.VERSION, names.GROUP, names.ROLE])
        for v in c.fleet.versions():
            role.add_metric([v.name, v.group or "", v.role], 1.0)
        yield role
        pods = GaugeMetricFamily(names.DISCOVERY_PODS, "Serving pods discovered per version.",
                                 labels=[names.VERSION, names.GROUP, names.ROLE])
        weight = GaugeMetricFamily(names.ROLLOUT_CANARY_WEIGHT, "The canary's traffic share by the Rollout's "
                                   "current step (setWeight, or Argo's routed weight).", labels=[names.GROUP])
        share = GaugeMetricFamily(names.ROLLOUT_CANARY_REPLICA_SHARE, "Canary pods / (canary + stable) pods.",
                                  labels=[names.GROUP])
        stale = GaugeMetricFamily(names.ROLLOUT_STALE_REVISION_PODS, "Serving pods of a revision that is neither "
                                  "the Rollout's stable nor its canary (old pods after promotion).",
                                  labels=[names.GROUP])
        conflict = GaugeMetricFamily(names.ROLLOUT_AUTOSCALER_CONFLICT, "1 per HPA/KEDA ScaledObject that scales "
                                     "a ReplicaSet or Deployment the Rollout owns instead of the Rollout.",
                                     labels=[names.GROUP, "autoscaler"])
        for group, st in sorted(c.states.items()):
            for v in st.versions:
                pods.add_metric([v.name, group, v.role], st.pods.get(v.name, 0))
            if st.canary_weight is not None:
                weight.add_metric([group], st.canary_weight)
            if st.canary_replica_share is not None:
                share.add_metric([group], st.canary_replica_share)
            stale.add_metric([group], st.stale_revision_pods)
            for a in st.autoscaler_conflicts[:16]:
                conflict.add_metric([group, a[:128]], 1.0)
        yield from (pods, weight, share, stale, conflict)


def build(ctx: Context) -> DiscoveryComponent | None:
    """The discovery component for `ctx.config.discovery`, or None when discovery is off."""
    spec = ctx.config.discovery.kubernetes
    if spec is None or not spec.models:
        return None
    try:
        client = api_client(kubeconfig=spec.kubeconfig, context=spec.context)
    except Exception as e:  # lightkube raises its own ConfigError, OSError, KeyError for a bad kubeconfig
        raise ConfigError(f"cannot set up the Kubernetes API client: {type(e).__name__}: {e}",
                          path="discovery.kubernetes.kubeconfig") from e
    c = DiscoveryComponent(spec=spec, fleet=ctx.fleet, client=client)
    ns = quote(spec.namespace, safe="")

    def reflector(resource: str, path: str, selector: dict[str, str] | None = None,
                  namespace: str = spec.namespace) -> Reflector:
        return Reflector(client, resource=resource, path=path, namespace=namespace,
                         label_selector=_selector(selector) if selector else None,
                         watch_timeout_seconds=spec.watch_timeout_seconds, relist_seconds=spec.relist_seconds,
                         backoff_seconds=spec.backoff_seconds, max_backoff_seconds=spec.max_backoff_seconds,
                         on_change=c._notify)

    for m in spec.models:
        c.pods[m.name] = reflector(f"pods ({m.name})", f"/api/v1/namespaces/{ns}/pods", m.selector)
    if any(m.rollout for m in spec.models):
        c.rollouts = reflector("rollouts.argoproj.io", f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/rollouts")
        c.autoscalers = [
            reflector("horizontalpodautoscalers.autoscaling",
                      f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers"),
            reflector("scaledobjects.keda.sh", f"/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects"),
        ]
    if spec.dcgm is not None:
        dns = quote(spec.dcgm.namespace, safe="")
        c.dcgm = reflector("pods (dcgm-exporter)", f"/api/v1/namespaces/{dns}/pods", spec.dcgm.selector,
                           namespace=spec.dcgm.namespace)
    ctx.ready_checks.append(c.not_ready)
    return c
