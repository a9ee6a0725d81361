"""A lean HTTP/1.1 client for the proxy's upstream: asyncio protocol + httptools (C) response parser, driven
by callbacks.

Why not httpx: per forwarded request it cost ~1 ms of CPU here (URL and header models, h11 parsing in
Python, a connection pool scanned per request). Why callbacks and not awaitables: a task, a future and an
async generator per request were most of what was left of the proxy's own CPU (`bench/proxy_profile.py`).
`UpstreamPool.send` writes the request in one syscall and hands the reply to a `ReplySink` as the parser
reads it: the head, each body piece as one socket read brought it, the end or a typed error. The sink
applies back-pressure with `Exchange.pause()` / `resume()`; idle keep-alive connections wait in an O(1) pool.
"""

from __future__ import annotations

import asyncio
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools

from observer.errors import ObserverError


class UpstreamError(ObserverError):
    """The upstream request failed; `kind` is connect | timeout | closed | protocol."""

    def __init__(self, message: str, *, kind: str) -> None:
        self.kind = kind
        super().__init__(message)


class ReplySink(Protocol):
    """What receives one reply. Exactly one of `on_end` / `on_error` is called last, unless the exchange was
    abandoned first."""

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...

    def on_body(self, data: bytes) -> None: ...

    def on_end(self) -> None: ...

    def on_error(self, error: UpstreamError) -> None: ...

    def flush(self) -> None:
        """Called after each socket read's worth of the reply was handed over."""


class Exchange:
    """One request in flight: `abandon()` when the client left (closes an unfinished reply's connection, so
    the upstream stops generating); `pause()` / `resume()` reading while the client is slow."""

    __slots__ = ("_conn", "done")

    def __init__(self) -> None:
        self._conn: _Connection | None = None
        self.done = False

    def abandon(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not self.done:
            conn.sink = None
            conn.close()
        self.done = True

    def pause(self) -> None:
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.pause_reading()

    def resume(self) -> None:
        if self._conn is not None and self._conn.transport is not None:
            self._conn.transport.resume_reading()


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parser callbacks feed the sink of the request in flight."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.sink: ReplySink | None = None
        self.exchange: Exchange | None = None
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_done = False
        self.delimited = False  # the reply has a Content-Length or is chunked
        self.head_request = False
        self.lost = False
        self.received = False
        self.reused = False
        self.payload = b""
        self.last_read = 0.0
        self.timer: asyncio.TimerHandle | None = None

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        self.received = True
        self.last_read = self.loop.time()
        sink = self.sink
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._fail(UpstreamError(f"upstream sent invalid HTTP: {e}", kind="protocol"))
        if sink is not None:
            sink.flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.sink is None:
            return
        if self.head_done and not self.delimited:
            self._finish()  # a body delimited by the end of the connection: this is its end
        elif not self.received and self.reused:
            # A reused connection the upstream had already closed: nothing was processed; send it again.
            # Detached, not cleared: a done exchange would be taken for a client that left, and the request
            # would never go out again nor be answered.
            sink, exchange, payload, head = self.sink, self.exchange, self.payload, self.head_request
            assert exchange is not None
            self._detach()
            self.pool._fresh(payload, sink, exchange, head)
        else:
            self._fail(UpstreamError("upstream closed the connection mid-reply", kind="closed"))

    # --- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        sink = self.sink
        if sink is None:
            return
        self.head_done = True
        lower = {k.lower() for k, _ in self.headers}
        self.delimited = b"content-length" in lower or b"transfer-encoding" in lower
        sink.on_head(self.parser.get_status_code(), self.headers)
        if self.head_request:  # no body follows a HEAD reply, whatever Content-Length says
            self._finish()
            self.close()

    def on_body(self, body: bytes) -> None:
        if self.sink is not None:
            self.sink.on_body(body)

    def on_message_complete(self) -> None:
        if self.sink is None or self.head_request:
            return
        keep = self.parser.should_keep_alive()
        self._finish()
        if self.transport is not None:
            self.transport.resume_reading()  # a sink that paused us must not leave a paused connection idle
        if keep and not self.lost:
            self.pool._release(self)
        else:
            self.close()

    # --- helpers
    def start(self, payload: bytes, sink: ReplySink, exchange: Exchange, head_request: bool) -> None:
        assert self.transport is not None
        self.sink, self.exchange, self.payload, self.head_request = sink, exchange, payload, head_request
        exchange._conn = self
        self.headers = []
        self.head_done = self.received = False
        self.last_read = self.loop.time()
        self.transport.write(payload)
        if self.timer is None:  # one timer per connection, re-armed when it fires: none made per request
            self.timer = self.loop.call_at(self.last_read + self.pool.read_timeout, self._tick)

    def _tick(self) -> None:
        """The read timeout: no byte for `read_timeout` seconds, before the head or between body pieces."""
        self.timer = None
        if self.sink is None:
            return
        due = self.last_read + self.pool.read_timeout
        if self.loop.time() < due:
            self.timer = self.loop.call_at(due, self._tick)
            return
        self._fail(UpstreamError("upstream did not answer within the read timeout" if not self.head_done
                                 else "upstream sent nothing within the read timeout", kind="timeout"))

    def _detach(self) -> None:
        """Unlink the request in flight from this connection; it may still go out on another."""
        if self.exchange is not None:
            self.exchange._conn = None
        self.sink = self.exchange = None
        self.payload = b""

    def _clear(self) -> None:
        """The request in flight is over (answered, failed or abandoned)."""
        if self.exchange is not None:
            self.exchange.done = True
        self._detach()

    def _finish(self) -> None:
        sink = self.sink
        self._clear()
        if sink is not None:
            sink.on_end()

    def _fail(self, error: UpstreamError) -> None:
        sink = self.sink
        self._clear()
        self.close()
        if sink is not None:
            sink.on_error(error)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()


class UpstreamPool:
    """Keep-alive connections to one upstream origin."""

    def __init__(self, base_url: str, *, connect_timeout: float, read_timeout: float, max_idle: int) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"upstream {base_url!r} must be an http://host[:port] URL")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.authority = f"{self.host}:{self.port}".encode() if parts.port else self.host.encode()
        self.prefix = parts.path.rstrip("/").encode()
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self._idle: list[_Connection] = []
        self._connecting: set[asyncio.Task[None]] = set()

    def encode(self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
        """The request as it goes on the wire: one buffer, one write."""
        head = [method.encode(), b" ", self.prefix + target, b" HTTP/1.1\r\nhost: ", self.authority, b"\r\n"]
        for k, v in headers:
            head += [k, b": ", v, b"\r\n"]
        if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
            head += [b"content-length: ", str(len(body)).encode(), b"\r\n"]
        head.append(b"\r\n")
        return b"".join(head) + body

    def send(self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes, sink: ReplySink
             ) -> Exchange:
        """Send a request; the reply goes to `sink`. On an idle connection this writes before returning."""
        payload = self.encode(method, target, headers, body)
        exchange = Exchange()
        head = method == "HEAD"
        while self._idle:
            conn = self._idle.pop()
            if conn.lost or conn.transport is None or conn.transport.is_closing():
                continue
            conn.reused = True
            conn.start(payload, sink, exchange, head)
            return exchange
        self._fresh(payload, sink, exchange, head)
        return exchange

    def _fresh(self, payload: bytes, sink: ReplySink, exchange: Exchange, head: bool) -> None:
        task = asyncio.get_running_loop().create_task(self._connect_and_start(payload, sink, exchange, head))
        self._connecting.add(task)
        task.add_done_callback(self._connecting.discard)

    async def _connect_and_start(self, payload: bytes, sink: ReplySink, exchange: Exchange, head: bool) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port),
                timeout=self.connect_timeout)
        except TimeoutError:
            error = UpstreamError(f"could not connect to {self.host}:{self.port} in time", kind="timeout")
        except OSError as e:
            error = UpstreamError(f"could not connect to {self.host}:{self.port}: {e.strerror or e}", kind="connect")
        else:
            if exchange.done:  # the client left while we connected: keep the connection for the next one
                self._release(conn)
            else:
                conn.start(payload, sink, exchange, head)
            return
        if not exchange.done:
            exchange.done = True
            sink.on_error(error)

    def _release(self, conn: _Connection) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        """Close idle connections and stop connecting."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()
        for task in list(self._connecting):
            task.cancel()
