"""Wiring of the sampling area into the running service: store, ingest API, pipeline, in-process proxies."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import APIRouter
from prometheus_client.registry import Collector

from observer.analyse.fingerprint import FingerprintCollector, FingerprintWatch
from observer.config.sampling import SamplingSpec
from observer.fleetview import VersionNames
from observer.httpserve import ConnectionGuard
from observer.sample.checks import proxy_upstream, shared_upstream, validate
from observer.sample.conversation import Keyer
from observer.sample.feedback import feedback_router
from observer.sample.feedback_otlp import feedback_logs_router
from observer.sample.genai import GenAiSource
from observer.sample.ingest import ingest_router
from observer.sample.metrics import SamplingCollector, SamplingMetrics
from observer.sample.otlp_receiver import otlp_router
from observer.sample.pipeline import SamplePipeline, Sink, StoreSink
from observer.sample.proxies import InProcessProxies
from observer.sample.redact import Redactor
from observer.sample.spans import SpanJoin
from observer.sample.tenants import Tenants
from observer.sample.upkeep import StoreUpkeep
from observer.store.base import ManagedStore
from observer.store.open import open_store
from observer.store.work import WorkCollector, refresh_counts
from observer.wiring.runtime import BaseComponent, Clock, Context, Job, Leadership

log = logging.getLogger("observer.sample")


def build_redactor(spec: SamplingSpec) -> Redactor | None:
    """The configured redactor, or None when redaction is off."""
    if not spec.redaction.enabled:
        return None
    return Redactor.build(kinds=spec.redaction.kinds, patterns=spec.redaction.patterns)


def build_pipeline(spec: SamplingSpec, sink: Sink, metrics: SamplingMetrics, *, clock: Clock = time.time
                   ) -> SamplePipeline:
    """The reservoir → queue → sink pipeline the in-process proxies and the sidecar both use."""
    return SamplePipeline(
        sink=sink, metrics=metrics, redactor=build_redactor(spec), fraction=spec.fraction_for,
        capacity=spec.reservoir.max_per_window, window_seconds=spec.reservoir.window_seconds,
        seed=spec.reservoir.seed, queue_size=spec.queue_size, batch_size=spec.batch_size, clock=clock,
        keyer=Keyer.from_spec(spec.conversations, metrics.conversation_keys),
        openai_user=spec.conversations.openai_user)


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
class SamplingComponent(BaseComponent):
    """Store + ingest router + sampling pipeline + the proxies configured with a `listen` address."""

    ctx: Context
    store: ManagedStore
    pipeline: SamplePipeline
    metrics: SamplingMetrics
    upkeep: StoreUpkeep
    proxies: InProcessProxies
    fingerprints: FingerprintWatch | None
    spans: SpanJoin | None
    genai: GenAiSource | None = None
    tenants: Tenants | None = None
    guards: Sequence[ConnectionGuard] = ()
    leader: Leadership | None = None  # the advisory lock of a shared (PostgreSQL) store
    name: str = "sample"

    def not_ready(self) -> str | None:
        return self.store.not_ready()

    def connection_guards(self) -> Sequence[ConnectionGuard]:
        return self.guards

    def leadership(self) -> Leadership | None:
        return self.leader

    def collectors(self) -> Sequence[Collector]:
        upkeep = self.upkeep
        return (SamplingCollector(self.metrics, queue_depth=self.pipeline.queue_depth,
                                  store_bytes=lambda: upkeep.size, store_rows=lambda: upkeep.rows,
                                  redaction_kinds=self.pipeline.redactor.kinds if self.pipeline.redactor else ()),
                WorkCollector(self.ctx.work),
                *((FingerprintCollector(self.fingerprints),) if self.fingerprints is not None else ()),
                *((self.spans,) if self.spans is not None else ()),
                *((self.genai,) if self.genai is not None else ()),
                *((self.tenants.collector(),) if self.tenants is not None else ()))

    def routers(self) -> Sequence[APIRouter]:
        config = self.ctx.config
        return (ingest_router(store=self.store, metrics=self.metrics, redactor=self.pipeline.redactor,
                              keyer=self.pipeline.keyer,
                              versions=VersionNames(self.ctx.fleet),
                              guard=self.ctx.private_guard(),
                              max_request_bytes=config.server.max_request_bytes,
                              max_batch_samples=config.sampling.max_batch_samples, clock=self.ctx.clock,
                              tenants=self.tenants),
                *((feedback_router(store=self.store, metrics=self.metrics, spec=config.sampling.feedback,
                                   redactor=self.pipeline.redactor, guard=self.ctx.private_guard(),
                                   max_request_bytes=config.server.max_request_bytes, clock=self.ctx.clock),)
                  if config.sampling.feedback.enabled else ()),
                *((feedback_logs_router(store=self.store, metrics=self.metrics, spec=config.sampling.feedback,
                                        redactor=self.pipeline.redactor, guard=self.ctx.private_guard(),
                                        max_request_bytes=config.server.max_request_bytes, clock=self.ctx.clock),)
                  if config.sampling.feedback.enabled and config.sampling.feedback.otel_evaluations else ()),
                *((otlp_router(self.spans, guard=self.ctx.private_guard(),
                               max_request_bytes=config.server.max_request_bytes, genai=self.genai),)
                  if self.spans is not None or self.genai is not None else ()))

    def jobs(self) -> Sequence[Job]:
        spec = self.ctx.config.sampling
        jobs = [Job("sample-store-prune", spec.store.prune_interval_seconds, self.upkeep.prune, singleton=True),
                Job("sample-store-stats", 15.0, self.upkeep.refresh)]
        if self.ctx.work.kinds:  # some area runs workers on this store's queue
            store, work = self.store, self.ctx.work
            jobs.append(Job("work-stats", 15.0, lambda: refresh_counts(store, work)))
        if (watch := self.fingerprints) is not None:
            clock = self.ctx.clock
            jobs.append(Job("fingerprint-check", spec.fingerprint.interval_seconds,
                            lambda: asyncio.to_thread(watch.check, clock())))
        return jobs

    async def start(self) -> None:
        await self.pipeline.start()
        await self.proxies.start()

    async def stop(self) -> None:
        await self.proxies.stop()
        await self.pipeline.stop()
        await asyncio.to_thread(self.store.close)


def build(ctx: Context) -> SamplingComponent | None:
    """Open the store (a corrupt or locked file fails here, at start) and wire the sampling area."""
    spec = ctx.config.sampling
    if not spec.enabled:
        return None
    validate(ctx.config)
    store = open_store(spec.store, clock=ctx.clock, wait=False)
    leader: Leadership | None = None
    if spec.store.url:
        from observer.store.leader import AdvisoryLeader

        leader = AdvisoryLeader(spec.store.url, connect_timeout_seconds=spec.store.connect_timeout_seconds)
    metrics = SamplingMetrics()
    pipeline = build_pipeline(spec, StoreSink(store), metrics, clock=ctx.clock)
    guards = {name: proxy_guard(spec, name) for name, o in spec.versions.items() if o.listen}
    watch = FingerprintWatch(ctx.fleet, store, spec.fingerprint) if spec.fingerprint.enabled else None
    spans = build_span_join(spec, sorted(guards))
    listeners = {name: o.listen for name, o in spec.versions.items() if o.listen}
    upstreams = {v: proxy_upstream(ctx.config, v) for v in listeners}
    tenants = Tenants(spec.tenants)
    proxies = InProcessProxies(spec.proxy, listeners, upstreams, guards, metrics, pipeline, spans,
                               by_model={v: shared_upstream(ctx.config, v) for v in listeners},
                               conversation_header=spec.conversations.header, tenants=tenants)
    og = spec.otel_genai
    genai = GenAiSource(store=store, metrics=metrics, redactor=pipeline.redactor, versions=VersionNames(ctx.fleet),
                        fraction=spec.fraction_for, models=og.models, version_attribute=og.version_attribute,
                        seed=spec.reservoir.seed, keyer=pipeline.keyer) if og.enabled else None
    return SamplingComponent(ctx=ctx, store=store, pipeline=pipeline, metrics=metrics,
                             upkeep=StoreUpkeep(store, spec.store), proxies=proxies, fingerprints=watch, spans=spans,
                             genai=genai, guards=tuple(guards.values()), leader=leader, tenants=tenants)

