"""Wiring of the sampling area into the running service: store, ingest API, pipeline, in-process proxies."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import httpx
from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.fingerprint import FingerprintCollector, FingerprintWatch
from observer.config.sampling import SamplingSpec
from observer.config.spec import ObserverConfig
from observer.errors import ConfigError
from observer.fleetview import VersionNames
from observer.httpserve import ConnectionGuard
from observer.sample.ingest import ingest_router
from observer.sample.metrics import SamplingCollector, SamplingMetrics
from observer.sample.otlp_receiver import otlp_router
from observer.sample.pipeline import SamplePipeline, Sink, StoreSink
from observer.sample.proxy import ProxyApp, build_client, default_upstream
from observer.sample.redact import Redactor
from observer.sample.server import RunningServer, start_server
from observer.sample.spans import SpanJoin
from observer.store.base import ManagedStore
from observer.store.open import open_store
from observer.wiring.runtime import Clock, Context, Job

log = logging.getLogger("observer.sample")


def build_redactor(spec: SamplingSpec) -> Redactor | None:
    """The configured redactor, or None when redaction is off."""
    if not spec.redaction.enabled:
        return None
    return Redactor.build(kinds=spec.redaction.kinds, patterns=spec.redaction.patterns)


def check_versions(config: ObserverConfig) -> None:
    """Refuse sampling overrides for versions the fleet does not define."""
    fleet = {v.name for v in config.fleet.versions}
    for name in config.sampling.versions:
        if name not in fleet:
            raise ConfigError(f"version {name!r} is not in fleet.versions ({sorted(fleet)})",
                              path=f"sampling.versions.{name}")


def proxy_upstream(config: ObserverConfig, version: str) -> str:
    """Where the proxy of `version` forwards: the override, else the version's OpenAI server root."""
    override = config.sampling.versions.get(version)
    if override is not None and override.upstream:
        return override.upstream
    try:
        upstream = default_upstream(config.fleet.version(version).openai)
    except KeyError as e:
        raise ConfigError(f"unknown version {version!r}", path="fleet.versions") from e
    if upstream is None:
        raise ConfigError(f"version {version!r} has no openai URL: set it or sampling.versions.{version}.upstream",
                          path=f"sampling.versions.{version}.upstream")
    return upstream


def build_pipeline(spec: SamplingSpec, sink: Sink, metrics: SamplingMetrics, *, clock: Clock = time.time
                   ) -> SamplePipeline:
    """The reservoir → queue → sink pipeline the in-process proxies and the sidecar both use."""
    return SamplePipeline(
        sink=sink, metrics=metrics, redactor=build_redactor(spec), fraction=spec.fraction_for,
        capacity=spec.reservoir.max_per_window, window_seconds=spec.reservoir.window_seconds,
        seed=spec.reservoir.seed, queue_size=spec.queue_size, batch_size=spec.batch_size, clock=clock)


def build_span_join(spec: SamplingSpec, versions: Sequence[str]) -> SpanJoin | None:
    """The engine-span join the proxies of `versions` file their requests in, or None when it is off."""
    es = spec.engine_spans
    return SpanJoin(wait_seconds=es.wait_seconds, max_pending=es.max_pending, versions=versions) \
        if es.enabled else None


def proxy_guard(spec: SamplingSpec, version: str) -> ConnectionGuard:
    """The client-connection limits of `version`'s proxy (sampling.proxy.*)."""
    p = spec.proxy
    return ConnectionGuard(server=f"proxy-{version}"[:63], max_connections=p.max_client_connections,
                           header_timeout_seconds=p.header_timeout_seconds, max_header_bytes=p.max_header_bytes)


@dataclass
class _StoreStats:
    size: int | None = None
    rows: dict[str, int] | None = None


@dataclass
class SamplingComponent:
    """Store + ingest router + sampling pipeline + the proxies configured with a `listen` address."""

    ctx: Context
    store: ManagedStore
    pipeline: SamplePipeline
    metrics: SamplingMetrics
    name: str = "sample"
    stats: _StoreStats = field(default_factory=_StoreStats)
    _servers: list[RunningServer] = field(default_factory=list)
    _apps: list[ProxyApp] = field(default_factory=list)
    _client: httpx.AsyncClient | None = None
    guards: dict[str, ConnectionGuard] = field(default_factory=dict)
    fingerprints: FingerprintWatch | None = None
    spans: SpanJoin | None = None

    @property
    def spec(self) -> SamplingSpec:
        return self.ctx.config.sampling

    def collectors(self) -> Sequence[Collector]:
        return (SamplingCollector(self.metrics, queue_depth=self.pipeline.queue_depth,
                                  store_bytes=lambda: self.stats.size, store_rows=lambda: self.stats.rows,
                                  redaction_kinds=self.pipeline.redactor.kinds if self.pipeline.redactor else ()),
                *((FingerprintCollector(self.fingerprints),) if self.fingerprints is not None else ()),
                *((self.spans,) if self.spans is not None else ()))

    def routers(self) -> Sequence[APIRouter]:
        config = self.ctx.config
        return (ingest_router(store=self.store, metrics=self.metrics, redactor=self.pipeline.redactor,
                              versions=VersionNames(self.ctx.fleet),
                              guard=self.ctx.private_guard(),
                              max_request_bytes=config.server.max_request_bytes,
                              max_batch_samples=self.spec.max_batch_samples, clock=self.ctx.clock),
                *((otlp_router(self.spans, guard=self.ctx.private_guard(),
                               max_request_bytes=config.server.max_request_bytes),) if self.spans is not None else ()))

    def jobs(self) -> Sequence[Job]:
        return (Job("sample-store-prune", self.spec.store.prune_interval_seconds, self.prune, singleton=True),
                Job("sample-store-stats", 15.0, self.refresh_stats),
                *((Job("fingerprint-check", self.spec.fingerprint.interval_seconds, self.check_fingerprints),)
                  if self.fingerprints is not None else ()))

    async def check_fingerprints(self) -> None:
        """Count the observed fingerprints of every version in the current and reference windows."""
        if self.fingerprints is not None:
            await asyncio.to_thread(self.fingerprints.check, self.ctx.clock())

    async def prune(self) -> None:
        """Apply retention by age and by rows per version, and to finished shared-work jobs."""
        store_spec = self.spec.store
        deleted = await asyncio.to_thread(self.store.prune, max_age_seconds=store_spec.retention_days * 86400,
                                          max_rows_per_version=store_spec.max_rows_per_version)
        if deleted:
            log.info("sample store: retention deleted %d sample(s)", deleted)
        jobs = await asyncio.to_thread(self.store.prune_jobs, max_age_seconds=store_spec.work.keep_hours * 3600)
        if jobs:
            log.info("sample store: retention deleted %d finished job(s)", jobs)
        await self.refresh_stats()

    async def refresh_stats(self) -> None:
        """Refresh the store size and row gauges (read at scrape time from this cache)."""
        self.stats.rows = await asyncio.to_thread(self.store.counts)
        self.stats.size = self.store.size_bytes()

    async def start(self) -> None:
        await self.pipeline.start()
        listeners = {name: o.listen for name, o in self.spec.versions.items() if o.listen}
        if not listeners:
            return
        proxy = self.spec.proxy
        self._client = build_client(connect_timeout=proxy.connect_timeout_seconds,
                                    read_timeout=proxy.read_timeout_seconds, max_connections=proxy.max_connections)
        for version, listen in listeners.items():
            host, _, port = listen.rpartition(":")
            app = ProxyApp(version=version, upstream=proxy_upstream(self.ctx.config, version), client=self._client,
                           metrics=self.metrics, pipeline=self.pipeline, max_capture_bytes=proxy.max_capture_bytes,
                           ready_path=proxy.ready_path, max_idle_connections=proxy.max_connections,
                           max_request_bytes=proxy.max_request_bytes, spans=self.spans)
            self._apps.append(app)
            try:
                self._servers.append(await start_server(app, host=host, port=int(port),
                                                        guard=self.guards[version]))
            except OSError as e:
                await self.stop()
                raise ConfigError(f"could not start the proxy of {version}: {e}",
                                  path=f"sampling.versions.{version}.listen") from e
            log.info("sampling proxy for %s listening on %s → %s", version, listen, app.upstream)

    async def stop(self) -> None:
        for running in self._servers:
            await running.stop()
        self._servers.clear()
        for app in self._apps:
            app.close()
        self._apps.clear()
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await self.pipeline.stop()
        await asyncio.to_thread(self.store.close)


def build(ctx: Context) -> SamplingComponent | None:
    """Open the store (a corrupt or locked file fails here, at start) and wire the sampling area."""
    spec = ctx.config.sampling
    if not spec.enabled:
        return None
    check_versions(ctx.config)
    store = open_store(spec.store, clock=ctx.clock, wait=False)
    ctx.ready_checks.append(store.not_ready)
    if spec.store.url and ctx.leader is None:
        from observer.store.postgres import AdvisoryLeader

        ctx.leader = AdvisoryLeader(spec.store.url, connect_timeout_seconds=spec.store.connect_timeout_seconds)
    metrics = SamplingMetrics()
    pipeline = build_pipeline(spec, StoreSink(store), metrics, clock=ctx.clock)
    guards = {name: proxy_guard(spec, name) for name, o in spec.versions.items() if o.listen}
    ctx.connection_guards.extend(guards.values())
    watch = FingerprintWatch(ctx.fleet, store, spec.fingerprint) if spec.fingerprint.enabled else None
    spans = build_span_join(spec, sorted(guards))
    return SamplingComponent(ctx=ctx, store=store, pipeline=pipeline, metrics=metrics, guards=guards,
                             fingerprints=watch, spans=spans)

