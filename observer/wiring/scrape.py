"""Wiring of the scraping area into the running service.

Builds the scraper and the SignalStore from `fleet` and `scrape`, runs a `scrape` job every
`scrape.interval_seconds` (never overlapping itself), exports the signals and self-metrics, serves
/api/v1/signals and /api/v1/targets, and becomes ready once the first cycle is done. Its SignalStore is
the `signals` service the canary area reads. It follows the live fleet: discovered pods become targets
at the next cycle, and leave it the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.cost import CostMeter
from observer.analyse.probe import Probe, ProbeCollector
from observer.analyse.scrapeloop import ScrapeLoop
from observer.analyse.signals import SignalStore
from observer.analyse.signals.identity import IdentityCollector
from observer.analyse.signals.pressure import PressureCollector
from observer.collect import edges
from observer.collect.dcgm import parse_dcgm
from observer.collect.routers import parse_router
from observer.collect.scraper import Scraper, TargetHealth
from observer.collect.vllm import parse_vllm
from observer.config.fleet import VersionSpec
from observer.conventions import vllm
from observer.conventions.routers import RouterKind
from observer.export import signals_api
from observer.export.collector import ScrapeCollector
from observer.wiring.runtime import BaseComponent, Context, Job


@dataclass
class ScrapeComponent(BaseComponent):
    """The scrape loop as a component: the scrape job (and the served-model reads), the signal and health
    exporters and the signals API."""

    loop: ScrapeLoop
    interval_seconds: float
    collector_list: Sequence[Collector]
    probe: Probe | None = None
    name: str = "scrape"

    @property
    def store(self) -> SignalStore:
        return self.loop.store

    async def cycle(self) -> None:
        await self.loop.cycle()

    def not_ready(self) -> str | None:
        return self.loop.not_ready()

    def collectors(self) -> Sequence[Collector]:
        return self.collector_list

    def routers(self) -> Sequence[APIRouter]:
        return (signals_api.router(self.loop.store, self.loop.health),)

    def jobs(self) -> Sequence[Job]:
        # Served models and each replica's tokenizer: also for versions discovered after start.
        jobs = [Job(name="scrape", interval_seconds=self.interval_seconds, func=self.loop.cycle),
                Job(name="served-models", interval_seconds=max(60.0, self.interval_seconds),
                    func=self.loop.served_models)]
        if self.probe is not None:
            jobs.append(Job(name="probe", interval_seconds=self.probe.spec.interval_seconds, func=self.probe.run))
        return jobs


def build(ctx: Context) -> ScrapeComponent:
    """Return the scrape component for `ctx.config` (also with no versions: it then serves empty signals)."""
    cfg = ctx.config.scrape
    stale = 2 * cfg.interval_seconds + cfg.timeout_seconds
    meter = CostMeter(ctx.config.cost, max_gap_seconds=stale) if ctx.config.cost.enabled else None
    store = SignalStore(ctx.fleet.versions(), window_seconds=cfg.window_seconds, stale_after_seconds=stale,
                        cost=meter, hung_after_seconds=cfg.hung_after_seconds)
    health = TargetHealth(store.bindings())
    scraper = Scraper(client=ctx.http,
                      parse_vllm=partial(parse_vllm, max_samples=cfg.max_samples_per_target,
                                         max_models=cfg.max_models_per_target),
                      parse_dcgm=partial(parse_dcgm, max_samples=cfg.max_samples_per_target),
                      parse_router=lambda text, kind: parse_router(text, RouterKind(kind),
                                                                   max_samples=cfg.max_samples_per_target,
                                                                   max_models=cfg.max_models_per_target),
                      timeout_seconds=cfg.timeout_seconds, max_body_bytes=cfg.max_body_bytes,
                      concurrency=cfg.concurrency, clock=ctx.clock)
    loop = ScrapeLoop(scraper=scraper, store=store, health=health, fleet=ctx.fleet, http=ctx.http, clock=ctx.clock,
                      timeout_seconds=cfg.timeout_seconds)

    def follow(versions: Sequence[VersionSpec]) -> None:
        store.set_versions(versions)
        health.rebind(store.bindings())

    ctx.fleet.subscribe(follow)
    collectors: list[Collector] = [ScrapeCollector(store, health), IdentityCollector(loop.identities)]
    if ctx.config.slo.enabled and (ths := edges.thresholds(ctx.config.slo)):
        window = cfg.window_seconds
        collectors.append(edges.ThresholdCollector(
            ths, lambda v, fam: store.histogram_delta(v, fam, since=ctx.clock() - window),
            lambda: [v.name for v in ctx.fleet.versions() if not v.retired]))
    window = cfg.window_seconds
    collectors.append(PressureCollector(
        lambda: [v.name for v in ctx.fleet.versions()],
        lambda v: store.histogram_delta(v, vllm.PROMPT_LENGTH, since=ctx.clock() - window),
        lambda v: max((int(i["max_model_len"]) for i in store.served_models(v).values()
                       if str(i.get("max_model_len", "")).isdigit()), default=None)))
    probe = None
    if ctx.config.probe.enabled:
        probe = Probe(ctx.config.probe, ctx.fleet, ctx.http, lambda v: list(store.served_models(v)))
        collectors.append(ProbeCollector(probe))
    return ScrapeComponent(loop=loop, interval_seconds=cfg.interval_seconds, collector_list=collectors, probe=probe)
