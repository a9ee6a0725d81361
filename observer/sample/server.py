"""Running the sampling proxy inside an existing event loop: start on a port, wait until bound, stop."""

from __future__ import annotations

from dataclasses import dataclass

from observer.httpserve import ConnectionGuard
from observer.sample.h1 import H1Server
from observer.sample.proxy import ProxyApp

KEEP_ALIVE_SECONDS = 75.0
"""Idle client connections close after this: longer than the usual load balancer's 60 s idle timeout, so the
balancer, not the proxy, closes first (a request never races a close)."""


@dataclass
class RunningServer:
    """A started proxy server."""

    server: H1Server

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        return self.server.port

    async def stop(self, *, timeout: float = 10.0) -> None:
        """Stop accepting, let running requests finish (up to `timeout`), then close the rest."""
        await self.server.stop(timeout=timeout)


async def start_server(app: ProxyApp, *, host: str, port: int, guard: ConnectionGuard | None = None
                       ) -> RunningServer:
    """Serve `app` on host:port in this loop; raise OSError naming the address if it cannot bind."""
    server = H1Server(app, guard=guard, keep_alive_seconds=KEEP_ALIVE_SECONDS)
    await server.start(host, port)
    return RunningServer(server)
