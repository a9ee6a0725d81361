"""`observer proxy` as its own process (the sidecar in a vLLM pod): serve until SIGINT/SIGTERM, then drain the
queued samples before exiting."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from dataclasses import dataclass

import httpx

from observer.httpserve import ConnectionGuard
from observer.sample.pipeline import RemoteSink, SamplePipeline, Sink
from observer.sample.podlabels import VersionFile
from observer.sample.proxy import ProxyApp
from observer.sample.server import start_server
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
        # Everything built so far (modules, config, wiring) lives as long as the process: frozen out of the
        # collector's reach, a full collection no longer walks it. Unfrozen, one stalled every request in
        # flight for ~40 ms every few seconds under load (bench/gateways.py, concurrency 64).
        gc.freeze()
        follower = (asyncio.create_task(self.version_file.follow(app, self.role), name="pod labels")
                    if self.version_file is not None else None)
        # A signal stops serving; the queued samples are drained after, before the process exits.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            server = await start_server(app, host=self.host, port=self.port, guard=self.guard)
            try:
                await stop.wait()
            finally:
                await server.stop()
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
