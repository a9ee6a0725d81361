"""Running ASGI apps (the proxy) inside an existing event loop: start on a port, wait until bound, stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import uvicorn

from observer.httpserve import ConnectionGuard, uvicorn_config
from observer.sample.proxy import QuietAborts


class EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to its host process."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@dataclass
class RunningServer:
    """A started server and the task serving it."""

    server: uvicorn.Server
    task: asyncio.Task[None]

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        for s in self.server.servers:
            for sock in s.sockets:
                return int(sock.getsockname()[1])
        raise RuntimeError("server has no socket")

    async def stop(self, *, timeout: float = 10.0) -> None:
        """Stop accepting, let running requests finish (up to `timeout`), then cancel."""
        self.server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self.task), timeout=timeout)
        except (TimeoutError, SystemExit):
            self.server.force_exit = True
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, SystemExit):
                await self.task


def server_config(app: Any, *, host: str, port: int, guard: ConnectionGuard | None = None) -> uvicorn.Config:
    """uvicorn settings for the proxy: no Server/Date headers of its own (the upstream's pass through)."""
    logging.getLogger("uvicorn.error").addFilter(QuietAborts())
    return uvicorn_config(app, host=host, port=port, guard=guard, server_header=False, date_header=False,
                          timeout_keep_alive=75)


async def start_server(app: Any, *, host: str, port: int, timeout: float = 10.0,
                       guard: ConnectionGuard | None = None) -> RunningServer:
    """Serve `app` on host:port in this loop; raise OSError naming the address if it cannot bind."""
    server = EmbeddedServer(server_config(app, host=host, port=port, guard=guard))
    task = asyncio.create_task(server.serve(), name=f"observer-server-{host}:{port}")
    deadline = time.monotonic() + timeout
    while not server.started and not task.done() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)
    if not server.started:
        running = RunningServer(server, task)
        await running.stop(timeout=1.0)
        raise OSError(f"could not listen on {host}:{port}")
    return RunningServer(server, task)
