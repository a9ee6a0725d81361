"""`observer proxy`: one version's sampling proxy as its own process (the sidecar in a vLLM pod).

Samples go to the observer's ingest API when an ingest URL is set (the usual sidecar set-up: raw text
is redacted before it leaves the pod), otherwise to the local SQLite store.

In a Rollout's pod the version is not known when the manifest is written: `--version-from` reads it
(and the role) from a downward-API `labels` file, and re-reads it, because Argo relabels pods at
promotion and the kubelet rewrites the file — an environment variable would keep the old value.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import signal
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from observer.config.fleet import VERSION_NAME
from observer.config.spec import ObserverConfig
from observer.errors import ConfigError
from observer.httpserve import GuardsCollector
from observer.sample.metrics import SamplingCollector, SamplingMetrics
from observer.sample.pipeline import RemoteSink, Sink, StoreSink
from observer.sample.proxy import ProxyApp, build_client
from observer.sample.server import EmbeddedServer, server_config
from observer.store.base import ManagedStore
from observer.store.open import open_store
from observer.wiring.runtime import resolve_auth_token
from observer.wiring.sampling import build_pipeline, build_span_join, check_versions, proxy_guard, proxy_upstream

log = logging.getLogger("observer.proxy")
_LINE = re.compile(r'^([^=\s]+)="((?:[^"\\]|\\.)*)"$')
ROLE_LABEL = "observer.dev/role"


def parse_labels(text: str) -> dict[str, str]:
    """The kubelet's downward-API labels file: one `key="value"` per line, value with Go-escaped quotes."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m:
            out[m.group(1)] = re.sub(r"\\(.)", r"\1", m.group(2))
    return out


@dataclass
class VersionFile:
    """Where the proxy's version comes from in a Rollout's pod: a label of the pod, via the downward API."""

    path: Path
    label: str = "rollouts-pod-template-hash"
    prefix: str = ""
    refresh_seconds: float = 5.0

    def read(self) -> tuple[str, str | None]:
        """(version, role); ConfigError naming the file and the label when it cannot be read."""
        try:
            labels = parse_labels(self.path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ConfigError(f"cannot read the pod's labels from {self.path}: {e.strerror} (mount the "
                              "downward API: volumes[].downwardAPI.items[].fieldRef.fieldPath: "
                              "metadata.labels)") from e
        value = labels.get(self.label)
        if not value:
            raise ConfigError(f"the pod has no label {self.label!r} in {self.path} (labels: "
                              f"{', '.join(sorted(labels)) or 'none'})")
        version = f"{self.prefix}{value}"
        if not VERSION_NAME.match(version):
            raise ConfigError(f"label {self.label}={value!r} does not make a valid version name "
                              f"({VERSION_NAME.pattern})")
        return version, labels.get(ROLE_LABEL)

    async def follow(self, app: ProxyApp, role: str | None) -> None:
        """Re-read every `refresh_seconds`; a changed version applies to the next request's sample."""
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                version, new_role = self.read()
            except ConfigError as e:
                log.warning("keeping version %s: %s", app.version, e)
                continue
            if version != app.version or new_role != role:
                log.info("pod labels changed: version %s → %s, role %s → %s", app.version, version, role,
                         new_role)
                app.version, role = version, new_role


async def run_proxy(config: ObserverConfig, *, version: str | None = None, listen: str | None = None,
                    upstream: str | None = None, ingest_url: str | None = None,
                    version_file: VersionFile | None = None) -> None:
    """Serve the proxy of `version` (or the one `version_file` names, followed) until SIGINT/SIGTERM, then
    drain queued samples."""
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
    assert version is not None
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
    client = build_client(connect_timeout=spec.proxy.connect_timeout_seconds,
                          read_timeout=spec.proxy.read_timeout_seconds, max_connections=spec.proxy.max_connections)
    app = ProxyApp(version=version, upstream=target, client=client, metrics=metrics, pipeline=pipeline,
                   max_capture_bytes=spec.proxy.max_capture_bytes, ready_path=spec.proxy.ready_path,
                   registry=registry, max_idle_connections=spec.proxy.max_connections,
                   max_request_bytes=spec.proxy.max_request_bytes, spans=spans)
    await pipeline.start()
    follower = (asyncio.create_task(version_file.follow(app, role), name="pod labels")
                if version_file is not None else None)
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
        if follower is not None:
            follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower
        await pipeline.stop()
        app.close()
        await client.aclose()
        if isinstance(sink, RemoteSink):
            sink.close()
        if store is not None:
            store.close()
