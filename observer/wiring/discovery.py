"""Wiring of Kubernetes discovery (observer.discover.watch): its reflectors, its collector, its tasks.

One pod reflector per configured model (its label selector, server-side), one on the namespace's
Argo Rollouts (when a model names one) and two on autoscalers (HPA, KEDA ScaledObject) for the
rollout-hygiene gauges, one on each collection a model's rollout source is read from (its row in
observer.config.sources), one on dcgm-exporter pods. Every change recomputes the discovered versions
(debounced) and replaces them in the context's LiveFleet, which re-binds the scrape targets and is
what the canary judge pairs and weighs from. A version whose last pod went away stays (no targets,
its counts frozen) for `remove_after_seconds`, then is dropped and its series end.

Readiness: /readyz answers 503 with the reason until every pod reflector (and the Rollout one) has
listed once — `observer serve` starts anyway, so an API server that is down at start is an error you
can read, not a crash loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote

from prometheus_client.registry import Collector

from observer.config.sources import BY_KEY
from observer.discover.collector import DiscoveryCollector
from observer.discover.kubeapi import Reflector, client_for
from observer.discover.planned import resources
from observer.discover.watch import Discovery
from observer.wiring.runtime import BaseComponent, Context


def _selector(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


@dataclass
class DiscoveryComponent(BaseComponent):
    """Discovery as a component: its tasks start and stop with the service; it exports what it sees."""

    discovery: Discovery
    name: str = "discovery"

    def collectors(self) -> Sequence[Collector]:
        return (DiscoveryCollector(self.discovery),)

    def not_ready(self) -> str | None:
        return self.discovery.not_ready()

    async def start(self) -> None:
        await self.discovery.start()

    async def stop(self) -> None:
        await self.discovery.stop()


def build(ctx: Context) -> DiscoveryComponent | None:
    """The discovery component for `ctx.config.discovery`, or None when discovery is off."""
    spec = ctx.config.discovery.kubernetes
    if spec is None or not spec.models:
        return None
    client = client_for(spec)
    ns = quote(spec.namespace, safe="")

    def reflector(resource: str, path: str, selector: dict[str, str] | None = None,
                  namespace: str = spec.namespace) -> Reflector:
        return Reflector(client, resource=resource, path=path, namespace=namespace,
                         label_selector=_selector(selector) if selector else None,
                         watch_timeout_seconds=spec.watch_timeout_seconds, relist_seconds=spec.relist_seconds,
                         backoff_seconds=spec.backoff_seconds, max_backoff_seconds=spec.max_backoff_seconds)

    pods = {m.name: reflector(f"pods ({m.name})", f"/api/v1/namespaces/{ns}/pods", m.selector) for m in spec.models}

    def collection(api: str, plural: str) -> Reflector:
        return reflector(f"{plural}.{api.rpartition('/')[0]}", f"/apis/{api}/namespaces/{ns}/{plural}")

    rollouts, autoscalers = None, []
    if any(m.rollout for m in spec.models):
        argo = BY_KEY["rollout"]
        assert argo.own is not None
        rollouts = collection(argo.own.watched()[0], argo.own.plural)
        autoscalers = [collection(api, c.plural) for c in argo.also for api in c.watched()]
    primitives = {key: collection(*key) for m in spec.models if m.primitive is not None
                  for key in resources(m.primitive)}
    dcgm = None
    if spec.dcgm is not None:
        dcgm = reflector("pods (dcgm-exporter)", f"/api/v1/namespaces/{quote(spec.dcgm.namespace, safe='')}/pods",
                         spec.dcgm.selector, namespace=spec.dcgm.namespace)
    d = Discovery(spec=spec, fleet=ctx.fleet, client=client, pods=pods, rollouts=rollouts, dcgm=dcgm,
                  autoscalers=autoscalers, primitives=primitives)
    return DiscoveryComponent(d)
