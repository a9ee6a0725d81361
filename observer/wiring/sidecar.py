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
from observer.errors import ConfigError
from observer.httpserve import GuardsCollector
from observer.sample.metrics import SamplingCollector, SamplingMetrics
from observer.sample.pipeline import RemoteSink, Sink, StoreSink
from observer.sample.podlabels import VersionFile
from observer.sample.proxy import app_for, client_for
from observer.sample.sidecar import Sidecar
from observer.store.base import ManagedStore
from observer.store.open import open_store
from observer.wiring.runtime import resolve_auth_token
from observer.wiring.sampling import build_pipeline, build_span_join, check_versions, proxy_guard, proxy_upstream

log = logging.getLogger("observer.proxy")


async def run_proxy(config: ObserverConfig, *, version: str | None = None, listen: str | None = None,
                    upstream: str | None = None, ingest_url: str | None = None,
                    version_file: VersionFile | None = None) -> None:
    """Build the proxy of `version` (or the one `version_file` names, followed) and serve it until
    SIGINT/SIGTERM, then drain queued samples (observer.sample.sidecar)."""
    check_versions(config)
    spec = config.sampling
    names = [v.name for v in config.fleet.versions]
    if (version is None) == (version_file is None):
        raise ConfigError("pass exactly one of --version and --version-from")
    role: str | None = None
    if version_file is not None:
        version, role = version_file.read()
        log.info("version %s (role %s) from the pod's labels in %s", version, role, version_file.path)
        if upstream is None and version not in names:
            raise ConfigError("--version-from needs --upstream (the vLLM server in this pod, e.g. "
                              "http://127.0.0.1:8000)")
    elif version not in names:
        raise ConfigError(f"unknown version {version!r}; configured: {names}", path="fleet.versions")
    if version is None:  # unreachable: exactly one of the two was given
        raise ConfigError("pass exactly one of --version and --version-from")
    override = spec.versions.get(version)
    address = listen or (override.listen if override is not None and override.listen else spec.proxy.listen)
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"listen address {address!r} must be HOST:PORT", path="sampling.proxy.listen")
    target = upstream or proxy_upstream(config, version)
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
    app = app_for(spec.proxy, version=version, upstream=target, client=client, metrics=metrics, pipeline=pipeline,
                  spans=spans, registry=registry)
    log.info("sampling proxy for %s on %s → %s (fraction %.3g, samples to %s)", version, address, target,
             spec.fraction_for(version), remote or spec.store.path)
    guard = proxy_guard(spec, version)
    registry.register(GuardsCollector(lambda: (guard,)))
    await Sidecar(app=app, pipeline=pipeline, client=client, sink=sink, store=store, guard=guard, host=host,
                  port=int(port), version_file=version_file, role=role).serve()
