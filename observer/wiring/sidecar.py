"""`observer proxy`: one version's sampling proxy as its own process (the sidecar in a vLLM pod).

Samples go to the observer's ingest API when an ingest URL is set (the usual sidecar set-up: raw text
is redacted before it leaves the pod), otherwise to the local SQLite store.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from prometheus_client import CollectorRegistry

from observer.config.spec import ObserverConfig
from observer.errors import ConfigError
from observer.httpserve import GuardsCollector
from observer.sample.metrics import SamplingCollector, SamplingMetrics
from observer.sample.pipeline import RemoteSink, Sink, StoreSink
from observer.sample.proxy import ProxyApp, build_client
from observer.sample.server import EmbeddedServer, server_config
from observer.store.sqlite import SqliteStore
from observer.wiring.runtime import resolve_auth_token
from observer.wiring.sampling import build_pipeline, check_versions, proxy_guard, proxy_upstream

log = logging.getLogger("observer.proxy")


async def run_proxy(config: ObserverConfig, *, version: str, listen: str | None = None,
                    upstream: str | None = None, ingest_url: str | None = None) -> None:
    """Serve the proxy of `version` until SIGINT/SIGTERM, then drain queued samples."""
    check_versions(config)
    spec = config.sampling
    names = [v.name for v in config.fleet.versions]
    if version not in names:
        raise ConfigError(f"unknown version {version!r}; configured: {names}", path="fleet.versions")
    override = spec.versions.get(version)
    address = listen or (override.listen if override is not None and override.listen else spec.proxy.listen)
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"listen address {address!r} must be HOST:PORT", path="sampling.proxy.listen")
    target = upstream or proxy_upstream(config, version)
    remote = ingest_url or spec.proxy.ingest_url
    store: SqliteStore | None = None
    sink: Sink
    if remote:
        sink = RemoteSink(remote, token=resolve_auth_token(config),
                          max_request_bytes=config.server.max_request_bytes)
    else:
        store = SqliteStore(spec.store.path, busy_timeout_seconds=spec.store.busy_timeout_seconds)
        sink = StoreSink(store)
    metrics = SamplingMetrics()
    pipeline = build_pipeline(spec, sink, metrics)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(SamplingCollector(
        metrics, queue_depth=pipeline.queue_depth,
        store_bytes=(lambda: store.size_bytes()) if store is not None else None,
        redaction_kinds=pipeline.redactor.kinds if pipeline.redactor else ()))
    client = build_client(connect_timeout=spec.proxy.connect_timeout_seconds,
                          read_timeout=spec.proxy.read_timeout_seconds, max_connections=spec.proxy.max_connections)
    app = ProxyApp(version=version, upstream=target, client=client, metrics=metrics, pipeline=pipeline,
                   max_capture_bytes=spec.proxy.max_capture_bytes, ready_path=spec.proxy.ready_path,
                   registry=registry, max_idle_connections=spec.proxy.max_connections,
                   max_request_bytes=spec.proxy.max_request_bytes)
    await pipeline.start()
    log.info("sampling proxy for %s on %s → %s (fraction %.3g, samples to %s)", version, address, target,
             spec.fraction_for(version), remote or spec.store.path)
    # Our own signal handling: uvicorn's re-raises SIGTERM after its shutdown, which would kill the
    # process before the queued samples are drained.
    guard = proxy_guard(spec, version)
    registry.register(GuardsCollector(lambda: (guard,)))
    server = EmbeddedServer(server_config(app, host=host, port=int(port), guard=guard))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: setattr(server, "should_exit", True))
    try:
        await server.serve()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await pipeline.stop()
        app.close()
        await client.aclose()
        if isinstance(sink, RemoteSink):
            sink.close()
        if store is not None:
            store.close()
