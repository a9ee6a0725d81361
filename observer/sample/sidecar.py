"""`observer proxy` as its own process (the sidecar in a vLLM pod): serve until SIGINT/SIGTERM, then drain the
queued samples before exiting."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from dataclasses import dataclass

import httpx

from observer.httpserve import ConnectionGuard
from observer.sample.pipeline import RemoteSink, SamplePipeline, Sink
from observer.sample.podlabels import VersionFile
from observer.sample.proxy import ProxyApp
from observer.sample.server import EmbeddedServer, server_config
from observer.store.base import ManagedStore

log = logging.getLogger("observer.proxy")


@dataclass
class Sidecar:
    """One version's proxy process, as built: the app, where its samples go, and how it is reached."""

    app: ProxyApp
    pipeline: SamplePipeline
    client: httpx.AsyncClient
    sink: Sink
    store: ManagedStore | None  # the local store when samples are not sent to an observer
    guard: ConnectionGuard
    host: str
    port: int
    version_file: VersionFile | None
    role: str | None

    async def serve(self) -> None:
        """Serve until SIGINT/SIGTERM, then stop following the labels, drain the pipeline and close."""
        app = self.app
        await self.pipeline.start()
        follower = (asyncio.create_task(self.version_file.follow(app, self.role), name="pod labels")
                    if self.version_file is not None else None)
        # Our own signal handling: uvicorn's re-raises SIGTERM after its shutdown, which would kill the
        # process before the queued samples are drained.
        server = EmbeddedServer(server_config(app, host=self.host, port=self.port, guard=self.guard))
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
            await self.pipeline.stop()
            app.close()
            await self.client.aclose()
            if isinstance(self.sink, RemoteSink):
                self.sink.close()
            if self.store is not None:
                self.store.close()
