"""Wiring of canary analysis into the service: periodic judge job, gauges, the verdict API, inventory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.canary.collector import CanaryCollector
from observer.analyse.canary.inventory import VersionInfoCollector
from observer.analyse.canary.service import CanaryService
from observer.analyse.canary.sources import (
    CanarySource,
    CostReader,
    DriftReader,
    OwnSource,
    PairsReader,
    PrometheusSource,
    QualityReader,
    SignalsReader,
)
from observer.collect import promql
from observer.collect.promql import PromQLClient
from observer.export import canary_api
from observer.wiring.runtime import BaseComponent, Context, Job


def make_source(ctx: Context, *, signals: SignalsReader | None, quality: QualityReader | None,
                drift: DriftReader | None, cost: CostReader | None = None, pairs: PairsReader | None = None
                ) -> CanarySource:
    """The data source the config names: Prometheus, or the observer's own services."""
    spec = ctx.config.canary
    if spec.source == "prometheus":
        assert spec.prometheus_url is not None
        client = PromQLClient(spec.prometheus_url, spec.prometheus, http=promql.build_client(spec.prometheus))
        return PrometheusSource(url=spec.prometheus_url, http=ctx.http, slice_seconds=spec.slice_seconds,
                                client=client)
    return OwnSource(signals=signals, quality=quality, drift=drift, slice_seconds=spec.slice_seconds, cost=cost,
                     pairs=pairs)


@dataclass
class CanaryComponent(BaseComponent):
    """The canary area in the running service."""

    service: CanaryService | None = None
    ctx: Context | None = None
    signals: SignalsReader | None = None

    def collectors(self) -> Sequence[Collector]:
        assert self.service is not None and self.ctx is not None
        s = self.service
        return (CanaryCollector(verdicts=s.verdicts, counters=lambda: dict(s.evaluations),
                                source_errors=lambda: dict(s.source_errors)),
                VersionInfoCollector(self.ctx.fleet, self.signals))

    def routers(self) -> Sequence[APIRouter]:
        assert self.service is not None
        return (canary_api.router(self.service),)

    async def stop(self) -> None:
        source = self.service.source if self.service is not None else None
        if isinstance(source, PrometheusSource) and source.client.http is not (self.ctx.http if self.ctx else None):
            await source.client.http.aclose()  # the PromQL client's own (TLS settings), not the shared one

    def jobs(self) -> Sequence[Job]:
        assert self.service is not None
        discovering = self.ctx is not None and self.ctx.config.discovery.kubernetes is not None
        if not self.service.pairs and not discovering:
            return ()
        return (Job(name="canary-judge", interval_seconds=self.ctx.config.canary.interval_seconds
                    if self.ctx else 30.0, func=self.service.run_once, run_at_start=False),)


def build(ctx: Context, *, signals: SignalsReader | None, quality: QualityReader | None,
          drift: DriftReader | None, cost: CostReader | None = None, pairs: PairsReader | None = None
          ) -> CanaryComponent | None:
    """Return the canary component (its `service` judges pairs), or None when the area is disabled."""
    if not ctx.config.canary.enabled:
        return None
    source = make_source(ctx, signals=signals, quality=quality, drift=drift, cost=cost, pairs=pairs)
    service = CanaryService(ctx.config, source, clock=ctx.clock, fleet=ctx.fleet)
    return CanaryComponent(name="canary", service=service, ctx=ctx, signals=signals)
