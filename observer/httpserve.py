"""One place for uvicorn's settings: every server the observer runs (service, proxy, simulator) starts here.

`uvicorn_config(..., guard=ConnectionGuard(...))` also bounds what an unauthenticated client can hold before
any route or token check runs, which uvicorn alone does not: a connection cap, a deadline for the request
head (slowloris: headers trickled in a byte at a time), and a cap on the head's size and header count
(431). Each refusal is counted by reason for the server's `/metrics`.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import uvicorn
from prometheus_client.core import CounterMetricFamily, Metric
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from observer import conventions as names

REFUSAL_REASONS = ("too_many_connections", "header_timeout", "header_too_large", "too_many_headers")

REFUSAL_RESPONSES = {
    "too_many_connections": b"HTTP/1.1 503 Service Unavailable",
    "header_timeout": b"HTTP/1.1 408 Request Timeout",
    "header_too_large": b"HTTP/1.1 431 Request Header Fields Too Large",
    "too_many_headers": b"HTTP/1.1 431 Request Header Fields Too Large",
}


@dataclass
class ConnectionGuard:
    """Limits on one server's connections, and the count of refusals by reason."""

    server: str
    max_connections: int = 1000
    header_timeout_seconds: float = 10.0
    max_header_bytes: int = 64 * 1024
    max_headers: int = 100
    refused: Counter[str] = field(default_factory=Counter)

    def protocol(self) -> type[asyncio.Protocol]:
        """uvicorn's httptools protocol with these limits."""
        guard = self

        class Guarded(_GuardedProtocol):
            limits = guard

        return Guarded


class GuardsCollector:
    """`observer_http_refused_total{server,reason}` of every guard (every reason, 0 included)."""

    def __init__(self, guards: Callable[[], Iterable[ConnectionGuard]]) -> None:
        self._guards = guards

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily(names.HTTP_REFUSED, "Client connections refused before any route ran, by "
                                "reason.", labels=[names.SERVER, names.REASON])
        for guard in self._guards():
            for reason in REFUSAL_REASONS:
                c.add_metric([guard.server, reason], float(guard.refused[reason]))
        yield c


class _GuardedProtocol(HttpToolsProtocol):
    limits: ConnectionGuard

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._refused = False
        self._head_bytes = 0
        self._header_count = 0
        self._head_timer: asyncio.TimerHandle | None = None
        if len(self.connections) > self.limits.max_connections:
            self._refuse("too_many_connections")
            return
        self._arm()

    def _arm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(self.limits.header_timeout_seconds, self._head_timeout)

    def _head_timeout(self) -> None:
        self._head_timer = None
        if not self._refused and not self.transport.is_closing():
            self._refuse("header_timeout")

    def _refuse(self, reason: str) -> None:
        self._refused = True
        self.limits.refused[reason] += 1
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        if not self.transport.is_closing():
            self.transport.write(REFUSAL_RESPONSES[reason] + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
            self.transport.close()

    def _count_head(self, n: int) -> None:
        self._head_bytes += n
        if self._head_bytes > self.limits.max_header_bytes:
            self._refuse("header_too_large")

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)

    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._head_bytes = self._header_count = 0
        if self._head_timer is None:  # a keep-alive connection's next request: a new deadline for its head
            self._arm()

    def on_url(self, url: bytes) -> None:
        if self._refused:
            return
        self._count_head(len(url))
        if not self._refused:
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        self._header_count += 1
        if self._header_count > self.limits.max_headers:
            self._refuse("too_many_headers")
            return
        self._count_head(len(name) + len(value) + 4)
        if not self._refused:
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if not self._refused:
            super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)


@contextmanager
def threaded_http_server(handler: type[BaseHTTPRequestHandler]) -> Iterator[int]:
    """A stdlib HTTP server on 127.0.0.1 (a free port) in a daemon thread; yields the port, stops on exit.
    For small scripted stand-ins (the game day's HTML page, the tests' scripted servers)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def uvicorn_config(app: Any, *, host: str = "127.0.0.1", port: int = 0, lifespan: str = "off",
                   guard: ConnectionGuard | None = None, **overrides: Any) -> uvicorn.Config:
    """uvicorn settings: quiet (warnings only, no access log), lifespan off unless asked; with `guard`, the
    connection limits above; `overrides` win."""
    settings: dict[str, Any] = {"log_level": "warning", "access_log": False, "lifespan": lifespan}
    if guard is not None:
        settings["http"] = guard.protocol()
    settings.update(overrides)
    return uvicorn.Config(app, host=host, port=port, **settings)
