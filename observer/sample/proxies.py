"""The observer's in-process sampling proxies: one per version configured with a `listen` address, sharing
one upstream client and the observer's sample pipeline."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

import httpx

from observer.config.sampling import ProxySpec
from observer.errors import ConfigError
from observer.httpserve import ConnectionGuard
from observer.sample.metrics import SamplingMetrics
from observer.sample.pipeline import SamplePipeline
from observer.sample.proxy import ProxyApp, app_for, client_for
from observer.sample.server import RunningServer, start_server
from observer.sample.spans import SpanJoin
from observer.sample.tenants import Tenants

log = logging.getLogger("observer.sample")


@dataclass
class InProcessProxies:
    """Starts the proxies (a port that cannot be bound is a ConfigError naming the key) and stops them."""

    spec: ProxySpec
    listeners: Mapping[str, str]  # version → HOST:PORT
    upstreams: Mapping[str, str]  # version → its OpenAI base URL
    guards: Mapping[str, ConnectionGuard]
    metrics: SamplingMetrics
    pipeline: SamplePipeline
    spans: SpanJoin | None
    by_model: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # version → {model: other version}
    conversation_header: str | None = None  # the request header naming the user's conversation
    tenants: Tenants | None = None  # the process's tenant labels (sampling.tenants)
    _servers: list[RunningServer] = field(default_factory=list, init=False)
    _apps: list[ProxyApp] = field(default_factory=list, init=False)
    _client: httpx.AsyncClient | None = field(default=None, init=False)

    async def start(self) -> None:
        if not self.listeners:
            return
        self._client = client_for(self.spec)
        for version, listen in self.listeners.items():
            host, _, port = listen.rpartition(":")
            app = app_for(self.spec, version=version, upstream=self.upstreams[version], client=self._client,
                          metrics=self.metrics, pipeline=self.pipeline, spans=self.spans,
                          by_model=self.by_model.get(version), conversation_header=self.conversation_header,
                          tenants=self.tenants)
            self._apps.append(app)
            try:
                self._servers.append(await start_server(app, host=host, port=int(port), guard=self.guards[version]))
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
