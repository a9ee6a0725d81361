"""Wiring of canary analysis into the service: periodic judge job, gauges, the verdict API, inventory."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import httpx
from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.canary.collector import CanaryCollector
from observer.analyse.canary.events import EvaluationSink
from observer.analyse.canary.inventory import EnvironmentCollector, VersionInfoCollector
from observer.analyse.canary.service import CanaryService
from observer.analyse.canary.sources import (
    CanarySource,
    CostReader,
    DriftReader,
    FeedbackReader,
    OwnSource,
    PairsReader,
    PrometheusSource,
    QualityReader,
    SignalsReader,
)
from observer.collect import promql
from observer.collect.promql import PromQLClient
from observer.export import canary_api, flagger_api
from observer.export.report import pages
from observer.export.report.examples import ExampleStore, StoreExamples
from observer.export.report.model import Example
from observer.fleetview import FleetView
from observer.sample.redact import Redactor
from observer.wiring.runtime import BaseComponent, Context, Job


def make_source(ctx: Context, *, signals: SignalsReader | None, quality: QualityReader | None,
                drift: DriftReader | None, cost: CostReader | None = None, pairs: PairsReader | None = None,
                feedback: FeedbackReader | None = None) -> CanarySource:
    """The data source the config names: Prometheus, or the observer's own services."""
    spec = ctx.config.canary
    if spec.source == "prometheus" and spec.prometheus_url is not None:  # the config requires the URL then
        client = PromQLClient(spec.prometheus_url, spec.prometheus, http=promql.build_client(spec.prometheus))
        return PrometheusSource(url=spec.prometheus_url, http=ctx.http, slice_seconds=spec.slice_seconds,
                                client=client, pairs=pairs, feedback=feedback)
    return OwnSource(signals=signals, quality=quality, drift=drift, slice_seconds=spec.slice_seconds, cost=cost,
                     pairs=pairs, feedback=feedback)


@dataclass
class CanaryComponent(BaseComponent):
    """The canary service as a component: the judge job, the verdict and inventory gauges, the verdict API."""

    service: CanaryService
    fleet: FleetView
    signals: SignalsReader | None
    interval_seconds: float
    always_judge: bool  # with discovery, pairs appear later: judge even while none is configured
    own_http: httpx.AsyncClient | None  # the PromQL client's own (TLS settings), closed at stop
    report: APIRouter | None = None
    name: str = "canary"

    def collectors(self) -> Sequence[Collector]:
        s = self.service
        return (CanaryCollector(verdicts=s.verdicts, counters=lambda: dict(s.evaluations),
                                source_errors=lambda: dict(s.source_errors)),
                VersionInfoCollector(self.fleet, self.signals), EnvironmentCollector(self.fleet, self.signals))

    def routers(self) -> Sequence[APIRouter]:
        if self.report is None:
            return canary_api.router(self.service), flagger_api.router(self.service)
        report_url = self.service.spec.report_url
        return (canary_api.router(self.service, report_url=report_url),
                flagger_api.router(self.service, report_url=report_url), self.report)

    async def stop(self) -> None:
        if self.own_http is not None:
            await self.own_http.aclose()

    def jobs(self) -> Sequence[Job]:
        if not self.service.pairs and not self.always_judge:
            return ()
        return (Job(name="canary-judge", interval_seconds=self.interval_seconds, func=self.service.run_once,
                    run_at_start=False),)


def report_router(ctx: Context, service: CanaryService, *, examples: ExampleStore | None,
                  redactor: Redactor | None, kappa: Callable[[], float | None]) -> APIRouter:
    """The report pages over the service's snapshots; texts from `examples`, redacted again by the sampling
    area's own redactor (a replayed answer was never captured)."""
    source = None if examples is None else StoreExamples(
        examples, redact=None if redactor is None else (lambda text: redactor.redact(text).text),
        trace_url=ctx.config.canary.report.trace_url)

    def group_of(name: str) -> str | None:
        v = ctx.fleet.version(name)
        return None if v is None else v.group

    async def worst(canary: str, *, since: float, limit: int) -> list[Example]:
        return [] if source is None else await asyncio.to_thread(source.worst, canary, since=since, limit=limit)

    return pages.router(ctx.config, service, token=ctx.auth_token, anonymous=ctx.config.server.auth.mode == "none",
                        examples=worst, group_of=group_of, kappa=kappa, clock=ctx.clock)


def build(ctx: Context, *, signals: SignalsReader | None, quality: QualityReader | None,
          drift: DriftReader | None, cost: CostReader | None = None, pairs: PairsReader | None = None,
          feedback: FeedbackReader | None = None, examples: ExampleStore | None = None,
          redactor: Redactor | None = None, kappa: Callable[[], float | None] = lambda: None,
          events: EvaluationSink | None = None) -> CanaryComponent | None:
    """Return the canary component (its `service` judges pairs), or None when the area is disabled."""
    spec = ctx.config.canary
    if not spec.enabled:
        return None
    source = make_source(ctx, signals=signals, quality=quality, drift=drift, cost=cost, pairs=pairs,
                         feedback=feedback)
    service = CanaryService(ctx.config, source, clock=ctx.clock, fleet=ctx.fleet, events=events)
    own = source.client.http if isinstance(source, PrometheusSource) and source.client.http is not ctx.http else None
    report = (report_router(ctx, service, examples=examples, redactor=redactor, kappa=kappa)
              if spec.report.enabled else None)
    return CanaryComponent(service=service, fleet=ctx.fleet, signals=signals, interval_seconds=spec.interval_seconds,
                           always_judge=ctx.config.discovery.kubernetes is not None, own_http=own, report=report)
