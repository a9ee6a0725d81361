"""The running observer: builds the context and components, schedules jobs, serves HTTP."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Callable, Collection, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from fastapi import FastAPI
from opentelemetry import trace
from opentelemetry.sdk.trace.export import SpanExporter
from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from observer import conventions as names
from observer import env
from observer.analyse.embed import Embedder
from observer.config.spec import ObserverConfig
from observer.export.app import create_app
from observer.httpserve import ConnectionGuard, GuardsCollector, uvicorn_config
from observer.telemetry import build_tracer
from observer.wiring.root import Area, Services, assemble, collect
from observer.wiring.runtime import Clock, Collected, Component, Context, Job, Leadership, resolve_auth_token

log = logging.getLogger("observer")
T = TypeVar("T")


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


class _LeaderCollector(Collector):
    """observer_leader: which replica runs the singleton jobs (shared store)."""

    def __init__(self, leader: Leadership) -> None:
        self.leader = leader

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        g = GaugeMetricFamily(names.LEADER, "1 on the replica that runs the singleton jobs (prune, drift, golden "
                                            "replays, live checks), 0 on the others.")
        g.add_metric([], 1.0 if self.leader.current() else 0.0)
        yield g


@dataclass
class Service:
    """One observer process: context, components, registry, scheduler and HTTP app."""

    config: ObserverConfig
    context: Context
    services: Services
    components: list[Component]
    collected: Collected  # what the components declared: readiness, connection limits, leadership, job kinds
    guards: tuple[ConnectionGuard, ...]  # the observer's own server's first, then the components'
    registry: CollectorRegistry
    app: FastAPI
    tracer: trace.Tracer
    job_metrics: JobMetrics
    scheduler: AsyncIOScheduler | None = None
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    _stopping: bool = False

    @classmethod
    def build(cls, config: ObserverConfig, *, http: httpx.AsyncClient | None = None, clock: Clock = time.time,
              areas: Collection[Area] | None = None, span_exporter: SpanExporter | None = None,
              embedder_factory: Callable[[], Embedder] | None = None, extra: Sequence[Component] = ()) -> Service:
        """Assemble the service from config (nothing starts until `start`); `areas`: a subset (default all);
        `extra`: components of an embedding program, added after the areas'."""
        client = http or httpx.AsyncClient(follow_redirects=False)
        srv = config.server
        guard = ConnectionGuard(server="observer", max_connections=srv.max_connections,
                                header_timeout_seconds=srv.header_timeout_seconds,
                                max_header_bytes=srv.max_header_bytes, max_headers=srv.max_headers)
        ctx = Context(config=config, http=client, clock=clock, auth_token=resolve_auth_token(config))
        services = assemble(ctx, areas=areas, embedder_factory=embedder_factory)
        _log_auth(config, ctx.auth_token)
        components = [*services.components, *extra]
        collected = collect(components)
        ctx.work.kinds = collected.job_kinds  # the queue's counts, exported once by the store's area
        guards = (guard, *collected.connection_guards)
        registry = CollectorRegistry(auto_describe=True)
        for component in components:
            for collector in component.collectors():
                registry.register(collector)
        job_metrics = JobMetrics.create(registry)
        registry.register(GuardsCollector(lambda: guards))
        if collected.leader is not None:
            registry.register(_LeaderCollector(collected.leader))
        routers = [r for c in components for r in c.routers()]
        app = create_app(registry=registry, routers=routers, not_ready=collected.not_ready)
        tracer = build_tracer(config.telemetry, exporter=span_exporter)
        return cls(config=config, context=ctx, services=services, components=components, collected=collected,
                   guards=guards, registry=registry, app=app, tracer=tracer, job_metrics=job_metrics)

    @property
    def guard(self) -> ConnectionGuard:
        """The observer's own HTTP server's connection limits (the first of the guards)."""
        return self.guards[0]

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
            leader = self.collected.leader
            if job.singleton and leader is not None and not await asyncio.to_thread(leader.holds):
                self.job_metrics.runs.labels(job.name, "skipped_not_leader").inc()
                return
            with self.tracer.start_as_current_span(f"job {job.name}") as span:
                try:
                    await job.func()
                except asyncio.CancelledError:
                    if self._stopping:  # cut short by the stop: not a failure, and no traceback in the log
                        return
                    raise
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
        self._stopping = True
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
            self.scheduler = None
        for component in reversed(self.components):
            await component.stop()
        if self.collected.leader is not None:
            await asyncio.to_thread(self.collected.leader.close)
        await self.context.http.aclose()

    def register(self, collector: Collector) -> None:
        """Register an extra collector (tests, embedding)."""
        self.registry.register(collector)


def _log_auth(config: ObserverConfig, token: str | None) -> None:
    if token is not None:
        return
    if config.server.auth.mode == "none":
        log.warning("server.auth.mode is none: sample ingest, sample read-back and drift reports are served "
                    "WITHOUT authentication to anyone who reaches %s:%d", config.server.host, config.server.port)
    elif config.sampling.enabled or config.drift.enabled:
        log.error("no bearer token configured: private routes (sample ingest, read-back, drift reports) answer "
                  "503; set %s or server.auth_token (or server.auth.mode: none for a loopback demo)",
                  env.AUTH_TOKEN)


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
    server = uvicorn.Server(uvicorn_config(service.app, host=config.server.host, port=config.server.port,
                                           lifespan="auto", guard=service.guard))
    await service.start()
    gc.freeze()  # as the sidecar does (observer.sample.sidecar): long-lived start-up objects out of full collections
    try:
        await server.serve()
    finally:
        await service.stop()


@dataclass
class ThreadedService:
    """A Service served by uvicorn on its own event loop in a background thread (game day, embedding, tests)."""

    url: str
    service: Service
    loop: asyncio.AbstractEventLoop
    server: Any
    thread: threading.Thread

    def call(self, coro: Coroutine[Any, Any, T], *, timeout: float = 30.0) -> T:
        """Run `coro` on the service's event loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, *, timeout: float = 20.0) -> None:
        """Stop uvicorn and the service, and join the thread (RuntimeError if it does not stop)."""
        self.server.should_exit = True
        self.thread.join(timeout=timeout)
        if self.thread.is_alive():
            raise RuntimeError(f"the observer at {self.url} did not stop within {timeout:.0f} s")


def start_in_thread(config: ObserverConfig, *, areas: Collection[Area] | None = None,
                    http: httpx.AsyncClient | None = None, span_exporter: SpanExporter | None = None,
                    name: str = "observer", start_timeout: float = 30.0) -> ThreadedService:
    """Build and start a Service for `config` on config.server's host:port in a background thread; return
    once it serves (RuntimeError naming the cause if it cannot start)."""
    import uvicorn

    started = threading.Event()
    box: dict[str, Any] = {}
    host, port = config.server.host, config.server.port

    async def main() -> None:
        service = Service.build(config, areas=areas, span_exporter=span_exporter, http=http)
        server = uvicorn.Server(uvicorn_config(service.app, host=host, port=port, guard=service.guard))
        box.update(service=service, server=server, loop=asyncio.get_running_loop())
        await service.start()
        started.set()
        try:
            await server.serve()
        finally:
            await service.stop()

    def run() -> None:
        try:
            asyncio.run(main())
        except BaseException as e:  # reported to the caller through `box`
            box["error"] = e
            started.set()

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    if not started.wait(start_timeout) or "error" in box:
        raise RuntimeError(f"the observer did not start: {box.get('error')!r}")
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:{port}"
    running = ThreadedService(url=url, service=box["service"], loop=box["loop"], server=box["server"],
                              thread=thread)
    deadline = time.monotonic() + start_timeout
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1.0).status_code == 200:
                return running
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or not thread.is_alive():
            running.stop()
            raise RuntimeError(f"the observer at {url} did not answer /healthz: {box.get('error')!r}")
        time.sleep(0.05)
