"""`observer proxy`: one version's sampling proxy as its own process (the sidecar in a vLLM pod).

Samples go to the observer's ingest API when an ingest URL is set (the usual sidecar set-up: raw text
is redacted before it leaves the pod), otherwise to the local SQLite store.

In a Rollout's pod the version is not known when the manifest is written: `--version-from` reads it
(and the role) from a downward-API `labels` file, and re-reads it, because Argo relabels pods at
promotion and the kubelet rewrites the file — an environment variable would keep the old value.
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry

from observer.config.spec import ObserverConfig
from observer.httpserve import GuardsCollector
from observer.sample.checks import proxy_target
from observer.sample.metrics import SamplingCollector, SamplingMetrics
from observer.sample.pipeline import RemoteSink, Sink, StoreSink
from observer.sample.podlabels import VersionFile
from observer.sample.proxy import app_for, client_for
from observer.sample.sidecar import Sidecar
from observer.sample.tenants import Tenants
from observer.store.base import ManagedStore
from observer.store.open import open_store
from observer.wiring.runtime import resolve_auth_token
from observer.wiring.sampling import build_pipeline, build_span_join, proxy_guard

log = logging.getLogger("observer.proxy")


async def run_proxy(config: ObserverConfig, *, version: str | None = None, listen: str | None = None,
                    upstream: str | None = None, ingest_url: str | None = None,
                    version_file: VersionFile | None = None) -> None:
    """Build the proxy of `version` (or the one `version_file` names, followed) and serve it until
    SIGINT/SIGTERM, then drain queued samples (observer.sample.sidecar)."""
    spec = config.sampling
    t = proxy_target(config, version=version, version_file=version_file, listen=listen, upstream=upstream)
    version, role, host, port, address, target = t.version, t.role, t.host, t.port, t.address, t.upstream
    remote = ingest_url or spec.proxy.ingest_url
    store: ManagedStore | None = None
    sink: Sink
    if remote:
        sink = RemoteSink(remote, token=resolve_auth_token(config),
                          max_request_bytes=config.server.max_request_bytes)
    else:
        store = open_store(spec.store)
        sink = StoreSink(store)
    metrics = SamplingMetrics()
    pipeline = build_pipeline(spec, sink, metrics)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(SamplingCollector(
        metrics, queue_depth=pipeline.queue_depth,
        store_bytes=(lambda: store.size_bytes()) if store is not None else None,
        redaction_kinds=pipeline.redactor.kinds if pipeline.redactor else ()))
    spans = build_span_join(spec, [version])
    if spans is not None:
        registry.register(spans)
    client = client_for(spec.proxy)
    tenants = Tenants(spec.tenants)
    registry.register(tenants.collector())
    app = app_for(spec.proxy, version=version, upstream=target, client=client, metrics=metrics, pipeline=pipeline,
                  spans=spans, registry=registry, conversation_header=spec.conversations.header, tenants=tenants)
    log.info("sampling proxy for %s on %s → %s (fraction %.3g, samples to %s)", version, address, target,
             spec.fraction_for(version), remote or spec.store.path)
    guard = proxy_guard(spec, version)
    registry.register(GuardsCollector(lambda: (guard,)))
    await Sidecar(app=app, pipeline=pipeline, client=client, sink=sink, store=store, guard=guard, host=host,
                  port=int(port), version_file=version_file, role=role).serve()
