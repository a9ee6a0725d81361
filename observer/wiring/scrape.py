"""Wiring of the scraping area into the running service.

Builds the scraper and the SignalStore from `fleet` and `scrape`, runs a `scrape` job every
`scrape.interval_seconds` (never overlapping itself), exports the signals and self-metrics, serves
/api/v1/signals and /api/v1/targets, and becomes ready once the first cycle is done. Its SignalStore is
the `signals` service the canary area reads. It follows the live fleet: discovered pods become targets
at the next cycle, and leave it the same way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import httpx
from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.cost import CostMeter
from observer.analyse.signals import SignalStore
from observer.collect import edges
from observer.collect.dcgm import parse_dcgm
from observer.collect.scraper import Scraper, TargetHealth
from observer.collect.vllm import parse_vllm
from observer.config.fleet import VersionSpec
from observer.export import signals_api
from observer.export.collector import ScrapeCollector
from observer.fleetview import FleetView
from observer.wiring.runtime import BaseComponent, Clock, Context, Job

log = logging.getLogger("observer.scrape")


@dataclass
class ScrapeComponent(BaseComponent):
    """The scrape loop: scraper → target health → signal store, plus its exporter and API."""

    name: str = "scrape"
    scraper: Scraper | None = None
    store: SignalStore | None = None
    health: TargetHealth | None = None
    interval_seconds: float = 15.0
    clock: Clock = time.time
    fleet: FleetView | None = None
    http: httpx.AsyncClient | None = None
    timeout_seconds: float = 5.0
    first_cycle_done: bool = False
    last_cycle_seconds: float | None = None
    _collectors: list[Collector] = field(default_factory=list)

    def collectors(self) -> Sequence[Collector]:
        return self._collectors

    def routers(self) -> Sequence[APIRouter]:
        assert self.store is not None and self.health is not None
        return (signals_api.router(self.store, self.health),)

    def jobs(self) -> Sequence[Job]:
        jobs = [Job(name="scrape", interval_seconds=self.interval_seconds, func=self.cycle)]
        if self.http is not None and self.fleet is not None and any(v.openai for v in self.fleet.versions()):
            jobs.append(Job(name="served-models", interval_seconds=max(60.0, self.interval_seconds),
                            func=self.served_models))
        return jobs

    async def served_models(self) -> None:
        """Read each version's /v1/models (vLLM reports max_model_len there) for the version inventory."""
        assert self.store is not None and self.http is not None and self.fleet is not None
        for v in self.fleet.versions():
            if not v.openai:
                continue
            url = v.openai.rstrip("/") + "/models"
            try:
                r = await self.http.get(url, timeout=self.timeout_seconds)
                r.raise_for_status()
                data = r.json().get("data", [])
                info = {str(m["id"]): {"max_model_len": str(m["max_model_len"])}
                        for m in data if isinstance(m, dict) and "id" in m and m.get("max_model_len") is not None}
            except (httpx.HTTPError, ValueError, AttributeError, KeyError, TypeError) as e:
                log.warning("version %s: could not read served models from %s: %s", v.name, url, e)
                continue
            self.store.record_served_info(v.name, info)

    async def cycle(self) -> None:
        """Scrape every target once, fold the results into the store, update target health."""
        assert self.scraper is not None and self.store is not None and self.health is not None
        started = self.clock()
        t0 = time.perf_counter()
        results = await self.scraper.scrape_all(self.health.targets)
        self.health.record(results)
        self.store.record(results, ts=started)
        self.last_cycle_seconds = time.perf_counter() - t0
        self.first_cycle_done = True
        down = sum(1 for r in results.values() if not r.ok)
        log.debug("scrape cycle: %d target(s), %d down, %.3fs", len(results), down, self.last_cycle_seconds)


def build(ctx: Context) -> ScrapeComponent:
    """Return the scrape component for `ctx.config` (also with no versions: it then serves empty signals)."""
    cfg = ctx.config.scrape
    stale = 2 * cfg.interval_seconds + cfg.timeout_seconds
    meter = CostMeter(ctx.config.cost, max_gap_seconds=stale) if ctx.config.cost.enabled else None
    store = SignalStore(ctx.fleet.versions(), window_seconds=cfg.window_seconds, stale_after_seconds=stale,
                        cost=meter)
    health = TargetHealth(store.bindings())
    scraper = Scraper(client=ctx.http,
                      parse_vllm=partial(parse_vllm, max_samples=cfg.max_samples_per_target,
                                         max_models=cfg.max_models_per_target),
                      parse_dcgm=partial(parse_dcgm, max_samples=cfg.max_samples_per_target),
                      timeout_seconds=cfg.timeout_seconds, max_body_bytes=cfg.max_body_bytes,
                      concurrency=cfg.concurrency, clock=ctx.clock)
    component = ScrapeComponent(scraper=scraper, store=store, health=health,
                                interval_seconds=cfg.interval_seconds, clock=ctx.clock,
                                fleet=ctx.fleet, http=ctx.http, timeout_seconds=cfg.timeout_seconds)

    def follow(versions: Sequence[VersionSpec]) -> None:
        store.set_versions(versions)
        health.rebind(store.bindings())

    ctx.fleet.subscribe(follow)
    component._collectors.append(ScrapeCollector(store, health))
    if ctx.config.slo.enabled and (ths := edges.thresholds(ctx.config.slo)):
        window = cfg.window_seconds
        component._collectors.append(edges.ThresholdCollector(
            ths, lambda v, fam: store.histogram_delta(v, fam, since=ctx.clock() - window),
            lambda: [v.name for v in ctx.fleet.versions() if not v.retired]))
    ctx.ready_checks.append(lambda: None if component.first_cycle_done else "the first scrape cycle has not finished")
    return component
