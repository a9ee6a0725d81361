"""The sampling proxy's HTTP/1.1 server: an asyncio protocol with httptools' C request parser, no ASGI.

Why not uvicorn: per forwarded request, its ASGI cycle (a task, message dicts, a disconnect watcher) cost
the proxy most of its own CPU (`bench/proxy_profile.py`, docs/benchmarks.md). Here a parsed request goes
straight to a `Handler`, which answers through the connection's `Responder`: a head, body pieces written as
they come, an end, or a close that tells the client the reply broke off. Requests on one connection are
answered in order (pipelined ones wait their turn, with reading paused).

A `ConnectionGuard` bounds what an unauthenticated client can hold, as it does for the observer's uvicorn
servers: a connection cap, a deadline for each request head, a cap on the head's size and header count.
Idle keep-alive connections close after `keep_alive_seconds`. Both deadlines run on one timer per
connection that is re-armed only when it fires (a timestamp per request, no timer per request).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Protocol, cast

import httptools

from observer.httpserve import REFUSAL_RESPONSES, ConnectionGuard

log = logging.getLogger("observer.proxy")

_NO_BODY = frozenset({204, 304})


def status_line(status: int) -> bytes:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    return f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")


_LINES: dict[int, bytes] = {int(code): status_line(code) for code in HTTPStatus}


@dataclass(slots=True)
class Request:
    """One parsed request: the raw target (path and query as sent), the path alone, headers with lower-case
    names in their order, the whole body."""

    method: str
    target: bytes
    path: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    t0: float  # perf_counter when its head was complete
    peer: str = ""  # the client's address (the TCP peer: a gateway in front, where there is one)


class Flow(Protocol):
    """Where the reply comes from: paused while the client's socket buffer is full."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...


class Responder:
    """How a handler answers one request; every call after the connection is gone does nothing."""

    __slots__ = ("_body_allowed", "_chunked", "_closing", "_conn", "done", "flow", "on_gone", "started")

    def __init__(self, conn: _Connection, *, closing: bool) -> None:
        self._conn = conn
        self._chunked = False
        self._body_allowed = True
        self._closing = closing
        self.flow: Flow | None = None
        self.on_gone: Callable[[], None] | None = None
        self.done = False
        self.started = False

    def start(self, status: int, headers: list[tuple[bytes, bytes]], *, length: bool, head: bool = False) -> None:
        """Send the status line and `headers`; `length`: they carry a Content-Length, else the body is chunked
        (or, to an HTTP/1.0 client, delimited by closing the connection)."""
        self.started = True
        self._body_allowed = not head and status not in _NO_BODY and status >= 200
        out = [_LINES.get(status) or status_line(status)]
        for k, v in headers:
            out += [k, b": ", v, b"\r\n"]
        if not length and self._body_allowed:
            if self._conn.http10:
                self._closing = True
            else:
                self._chunked = True
                out.append(b"transfer-encoding: chunked\r\n")
        if self._closing:
            out.append(b"connection: close\r\n")
        out.append(b"\r\n")
        self._conn.pending.append(b"".join(out))

    def body(self, data: bytes) -> None:
        """Queue a body piece: it leaves with the next `flush()` (or `end()`)."""
        if not data or not self._body_allowed:
            return
        if self._chunked:
            self._conn.pending.append(b"%x\r\n%b\r\n" % (len(data), data))
        else:
            self._conn.pending.append(data)

    def flush(self) -> None:
        """Send what is queued in one write: the source calls it once per socket read it handled, so a head
        and a body that arrived together leave together (one syscall where there would be two or three)."""
        self._conn.flush()

    def end(self) -> None:
        """The reply is complete: the next request on the connection may go."""
        if self.done:
            return
        self.done = True
        self.flow = self.on_gone = None  # they point back at the handler's request: no cycle left to collect
        if self._chunked:
            self._conn.pending.append(b"0\r\n\r\n")
        self._conn.flush()
        self._conn.finished(self, keep=not self._closing)

    def reply(self, status: int, body: bytes, *, content_type: bytes = b"application/json") -> None:
        """A whole small reply in one write."""
        self.start(status, [(b"content-type", content_type), (b"content-length", b"%d" % len(body))], length=True)
        self.body(body)
        self.end()

    def broke_off(self) -> None:
        """The reply cannot be finished: close the connection after what was sent, so the client sees an
        incomplete message (as it would from the upstream itself), never a clean end."""
        if self.done:
            return
        self.done = True
        self.flow = self.on_gone = None
        self._conn.flush()
        self._conn.close()


class Handler(Protocol):
    """Answers requests (the proxy)."""

    max_request_bytes: int

    def handle(self, request: Request, responder: Responder) -> None: ...

    def refuse_too_large(self, path: str, responder: Responder) -> None: ...


class _Connection(asyncio.Protocol):
    def __init__(self, server: H1Server) -> None:
        self.server = server
        self.handler = server.handler
        self.guard = server.guard
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.peer = ""
        self.parser = httptools.HttpRequestParser(self)
        self.http10 = False
        self.refused = False
        self.in_head = True
        self.head_since = self.loop.time()
        self.last_active = self.head_since
        self.head_bytes = 0
        self.header_count = 0
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.body: list[bytes] = []
        self.body_size = 0
        self.t0 = 0.0
        self.current: Responder | None = None
        self.pending: list[bytes] = []
        self.queue: deque[tuple[Request, bool]] = deque()
        self.reading = True
        self.timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        self.peer = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        self.server.connections.add(self)
        if self.guard is not None and len(self.server.connections) > self.guard.max_connections:
            self._refuse("too_many_connections")
            return
        self._arm(self.loop.time())

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        current, self.current = self.current, None
        self.queue.clear()
        if current is not None and not current.done:
            current.done = True
            gone, current.on_gone, current.flow = current.on_gone, None, None
            if gone is not None:
                gone()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        if self.refused:
            return
        self.last_active = self.loop.time()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._plain_close(400, b'{"error":"protocol upgrades are not supported by the observer proxy"}')
        except httptools.HttpParserError:
            self._plain_close(400, b'{"error":"malformed HTTP request"}')

    def pause_writing(self) -> None:
        if self.current is not None and self.current.flow is not None:
            self.current.flow.pause()

    def resume_writing(self) -> None:
        if self.current is not None and self.current.flow is not None:
            self.current.flow.resume()

    # --- httptools callbacks
    def on_message_begin(self) -> None:
        self.url = b""
        self.headers = []
        self.body = []
        self.body_size = 0
        self.head_bytes = self.header_count = 0
        if not self.in_head:
            self.in_head = True
            self.head_since = self.loop.time()

    def on_url(self, url: bytes) -> None:
        self.url += url
        self._count_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.refused:
            return
        self.header_count += 1
        if self.guard is not None and self.header_count > self.guard.max_headers:
            self._refuse("too_many_headers")
            return
        self._count_head(len(name) + len(value) + 4)
        self.headers.append((name.lower(), value))

    def on_headers_complete(self) -> None:
        if self.refused:
            return
        self.in_head = False
        self.t0 = time.perf_counter()
        self.http10 = self.parser.get_http_version() == "1.0"
        limit = self.handler.max_request_bytes
        for k, v in self.headers:
            if k == b"content-length":
                try:
                    too_large = int(v) > limit
                except ValueError:
                    too_large = False
                if too_large:
                    self._too_large()
                    return
            elif k == b"expect" and v.lower() == b"100-continue":
                self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def on_body(self, body: bytes) -> None:
        if self.refused:
            return
        self.body_size += len(body)
        if self.body_size > self.handler.max_request_bytes:
            self._too_large()
            return
        self.body.append(body)

    def on_message_complete(self) -> None:
        if self.refused:
            return
        url = self.url
        q = url.find(b"?")
        path = (url if q < 0 else url[:q]).decode("latin-1")
        body = self.body[0] if len(self.body) == 1 else b"".join(self.body)
        request = Request(self.parser.get_method().decode("latin-1"), url, path, self.headers, body, self.t0,
                          self.peer)
        keep = self.parser.should_keep_alive()
        if self.current is None and not self.queue:
            self._dispatch(request, keep)
        else:
            self.queue.append((request, keep))
            if self.reading and self.transport is not None:
                self.reading = False
                self.transport.pause_reading()

    # --- requests
    def _dispatch(self, request: Request, keep: bool) -> None:
        responder = Responder(self, closing=not keep)
        self.current = responder
        try:
            self.handler.handle(request, responder)
        except Exception:
            log.exception("proxy: handling %s %s failed", request.method, request.path)
            if not responder.started:
                responder.reply(500, b'{"error":"the observer proxy failed on this request; see its log"}')
            else:
                responder.broke_off()

    def finished(self, responder: Responder, *, keep: bool) -> None:
        if responder is not self.current:
            return
        self.current = None
        self.last_active = self.loop.time()
        if not keep:
            self.close()
            return
        if self.queue:
            request, k = self.queue.popleft()
            self._dispatch(request, k)
        elif not self.reading and self.transport is not None:
            self.reading = True
            self.transport.resume_reading()

    # --- limits
    def _arm(self, now: float) -> None:
        deadlines = [self.last_active + self.server.keep_alive_seconds]
        if self.guard is not None and self.in_head:
            deadlines.append(self.head_since + self.guard.header_timeout_seconds)
        self.timer = self.loop.call_at(max(now, min(deadlines)) + 0.001, self._tick)

    def _tick(self) -> None:
        self.timer = None
        if self.transport is None or self.refused:
            return
        now = self.loop.time()
        if self.guard is not None and self.in_head and now >= self.head_since + self.guard.header_timeout_seconds \
                and (self.current is None and not self.queue):
            self._refuse("header_timeout")
            return
        if self.current is None and not self.queue and not self.in_head_started() \
                and now >= self.last_active + self.server.keep_alive_seconds:
            self.close()
            return
        self._arm(now)

    def in_head_started(self) -> bool:
        """A request head has begun arriving (its deadline is the guard's, not keep-alive's)."""
        return self.in_head and bool(self.url or self.headers)

    def _count_head(self, n: int) -> None:
        self.head_bytes += n
        if self.guard is not None and self.head_bytes > self.guard.max_header_bytes:
            self._refuse("header_too_large")

    def _refuse(self, reason: str) -> None:
        self.refused = True
        assert self.guard is not None
        self.guard.refused[reason] += 1
        self.write(REFUSAL_RESPONSES[reason] + b"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        self.close()

    def _too_large(self) -> None:
        self.refused = True  # the rest of the body is not read: the connection closes after the answer
        responder = Responder(self, closing=True)
        self.current = responder
        q = self.url.find(b"?")
        self.handler.refuse_too_large((self.url if q < 0 else self.url[:q]).decode("latin-1"), responder)

    def _plain_close(self, status: int, body: bytes) -> None:
        self.refused = True
        self.write(status_line(status) + b"content-type: application/json\r\ncontent-length: %d\r\n"
                   b"connection: close\r\n\r\n%b" % (len(body), body))
        self.close()

    # --- output
    def flush(self) -> None:
        pending = self.pending
        if pending:
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            pending.clear()
            self.write(data)

    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.write(data)

    def close(self) -> None:
        transport = self.transport
        if transport is not None and not transport.is_closing():
            transport.close()


class H1Server:
    """Serves `handler` on host:port in the running loop; `stop()` lets requests in flight finish."""

    def __init__(self, handler: Handler, *, guard: ConnectionGuard | None = None,
                 keep_alive_seconds: float = 75.0) -> None:
        self.handler = handler
        self.guard = guard
        self.keep_alive_seconds = keep_alive_seconds
        self.connections: set[_Connection] = set()
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        """Listen; OSError naming the address when it cannot bind."""
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(lambda: _Connection(self), host, port, backlog=2048)
        except OSError as e:
            raise OSError(e.errno, f"could not listen on {host}:{port}: {e.strerror or e}") from e

    @property
    def port(self) -> int:
        """The bound port (useful with port 0)."""
        if self._server is None:
            raise RuntimeError("server has no socket")
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self, *, timeout: float = 10.0) -> None:
        """Stop accepting, close idle connections, let running requests finish (up to `timeout`), then close
        the rest."""
        if self._server is not None:
            self._server.close()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            for conn in list(self.connections):
                if conn.current is None and not conn.queue:
                    conn.close()
            if not self.connections or loop.time() >= deadline:
                break
            await asyncio.sleep(0.02)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.abort()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
            self._server = None
