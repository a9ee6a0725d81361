"""The running observer: builds the context and components, schedules jobs, serves HTTP."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import httpx
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SpanExporter
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.registry import Collector

from observer import conventions as names
from observer.config.spec import ObserverConfig
from observer.export.app import create_app
from observer.runtime import Builder, Clock, Component, Context, Job, all_builders
from observer.telemetry import build_tracer

log = logging.getLogger("observer")


@dataclass
class JobMetrics:
    """Self-metrics of the periodic jobs."""

    runs: Counter
    last_success: Gauge

    @classmethod
    def create(cls, registry: CollectorRegistry) -> JobMetrics:
        return cls(
            runs=Counter(names.JOB_RUNS, "Periodic job runs by outcome.", ["job", "outcome"], registry=registry),
            last_success=Gauge(names.JOB_LAST_SUCCESS, "Unix time of the last successful job run.", ["job"],
                               registry=registry),
        )


@dataclass
class Service:
    """One observer process: context, components, registry, scheduler and HTTP app."""

    config: ObserverConfig
    context: Context
    components: list[Component]
    registry: CollectorRegistry
    app: FastAPI
    tracer: trace.Tracer
    job_metrics: JobMetrics
    scheduler: AsyncIOScheduler | None = None
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    @classmethod
    def build(cls, config: ObserverConfig, *, http: httpx.AsyncClient | None = None, clock: Clock = time.time,
              builders: Iterable[Builder] | None = None, span_exporter: SpanExporter | None = None) -> Service:
        """Assemble the service from config (nothing starts until `start`)."""
        client = http or httpx.AsyncClient(follow_redirects=False)
        ctx = Context(config=config, http=client, clock=clock)
        components: list[Component] = []
        for build in builders if builders is not None else all_builders():
            component = build(ctx)
            if component is not None:
                components.append(component)
        registry = CollectorRegistry(auto_describe=True)
        for component in components:
            for collector in component.collectors():
                registry.register(collector)
        job_metrics = JobMetrics.create(registry)
        routers = [r for c in components for r in c.routers()]
        app = create_app(registry=registry, routers=routers, ready=lambda: all(c() for c in ctx.ready_checks))
        tracer = build_tracer(config.telemetry, exporter=span_exporter)
        return cls(config=config, context=ctx, components=components, registry=registry, app=app,
                   tracer=tracer, job_metrics=job_metrics)

    def jobs(self) -> list[Job]:
        """Every periodic job of every component."""
        return [j for c in self.components for j in c.jobs()]

    async def run_job(self, job: Job) -> None:
        """Run one job inside a span; never overlapping itself; failures counted and logged, not raised."""
        lock = self._locks.setdefault(job.name, asyncio.Lock())
        if lock.locked():
            self.job_metrics.runs.labels(job.name, "skipped_overlap").inc()
            return
        async with lock:
            with self.tracer.start_as_current_span(f"job {job.name}") as span:
                try:
                    await job.func()
                except Exception as e:  # a failing job must not kill the service
                    span.record_exception(e)
                    span.set_status(trace.Status(trace.StatusCode.ERROR, str(e)))
                    self.job_metrics.runs.labels(job.name, "error").inc()
                    log.error("job %s failed: %s", job.name, e, exc_info=log.isEnabledFor(logging.DEBUG))
                    return
            self.job_metrics.runs.labels(job.name, "ok").inc()
            self.job_metrics.last_success.labels(job.name).set(self.context.clock())

    async def start(self) -> None:
        """Start components, then the scheduler (jobs run at once, then every interval, no overlap)."""
        for component in self.components:
            await component.start()
        self.scheduler = AsyncIOScheduler()
        for job in self.jobs():
            # APScheduler 3 adds a job *paused* when next_run_time=None is passed: only pass it to run at once.
            first = {"next_run_time": _now()} if job.run_at_start else {}
            self.scheduler.add_job(self.run_job, "interval", args=[job], seconds=job.interval_seconds,
                                   id=job.name, max_instances=1, coalesce=True, misfire_grace_time=None, **first)
        self.scheduler.start()

    async def stop(self) -> None:
        """Stop the scheduler and components, then close the HTTP client."""
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None
        for component in reversed(self.components):
            await component.stop()
        await self.context.http.aclose()

    def register(self, collector: Collector) -> None:
        """Register an extra collector (tests, embedding)."""
        self.registry.register(collector)


def _now() -> object:
    from datetime import UTC, datetime

    return datetime.now(UTC)


async def serve(config: ObserverConfig) -> None:
    """Run the observer until cancelled (SIGINT/SIGTERM stop uvicorn, then the service)."""
    import uvicorn

    # httpx logs every request at INFO: one line per target per scrape cycle. Failures are logged by
    # the scraper itself (once, naming the target), so keep httpx quiet unless someone set its level.
    httpx_log = logging.getLogger("httpx")
    if httpx_log.level == logging.NOTSET:
        httpx_log.setLevel(logging.WARNING)
    service = Service.build(config)
    server = uvicorn.Server(uvicorn.Config(service.app, host=config.server.host, port=config.server.port,
                                           log_level="warning", access_log=False))
    await service.start()
    try:
        await server.serve()
    finally:
        await service.stop()
