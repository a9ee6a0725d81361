"""A lean HTTP/1.1 client for the proxy's upstream: asyncio protocol + httptools (C) response parser.

Why not httpx: per forwarded request it cost ~1 ms of CPU here (URL and header models, h11 parsing in
Python, a connection pool scanned per request). This client writes the request in one syscall, parses
replies in C, hands body bytes to the proxy exactly as they arrive (everything received by one socket
read comes as one batch), applies back-pressure when the client reads slowly, and keeps idle
keep-alive connections in an O(1) pool.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import urlsplit

import httptools

from observer.errors import ObserverError

_PAUSE_BYTES = 1024 * 1024  # stop reading from the upstream while this much waits for the client


class UpstreamError(ObserverError):
    """The upstream request failed; `kind` is connect | timeout | closed | protocol."""

    def __init__(self, message: str, *, kind: str) -> None:
        self.kind = kind
        super().__init__(message)


@dataclass(eq=False)
class UpstreamResponse:
    """Status and raw headers of a reply; `batches()` yields its body as it arrives."""

    status: int = 0
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    _conn: _Connection | None = None
    _chunks: list[bytes] = field(default_factory=list)
    _buffered: int = 0
    _complete: bool = False
    _error: UpstreamError | None = None
    _event: asyncio.Event = field(default_factory=asyncio.Event)

    def header(self, name: bytes) -> bytes | None:
        """First value of a header (name in lower case)."""
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    async def batches(self, *, read_timeout: float) -> AsyncGenerator[bytes, None]:
        """Body bytes as received (each socket read's worth joined); UpstreamError if the reply breaks."""
        loop = asyncio.get_running_loop()
        while True:
            if self._chunks:
                data = self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
                self._chunks.clear()
                self._buffered = 0
                if self._conn is not None:
                    self._conn.resume()
                yield data
            elif self._error is not None:
                raise self._error
            elif self._complete:
                return
            else:
                self._event.clear()
                timer = loop.call_later(read_timeout, self._fail,
                                        UpstreamError("upstream sent nothing within the read timeout", kind="timeout"))
                try:
                    await self._event.wait()
                finally:
                    timer.cancel()

    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._buffered += len(data)
        self._event.set()

    def _finish(self) -> None:
        self._complete = True
        self._event.set()

    def close(self) -> None:
        """Abandon the reply: an unfinished one closes its connection (the upstream stops generating)."""
        if not self._complete and self._conn is not None:
            self._conn.close()
        self._conn = None

    def _fail(self, error: UpstreamError) -> None:
        if not self._complete and self._error is None:
            self._error = error
            if self._conn is not None:
                self._conn.close()
        self._event.set()


class _Connection(asyncio.Protocol):
    """One keep-alive connection; parser callbacks feed the response in flight."""

    def __init__(self, pool: UpstreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.response: UpstreamResponse | None = None
        self.headers_done: asyncio.Future[None] | None = None
        self.head_request = False
        self.lost = False
        self.paused = False
        self.received = False

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass asyncio's

    def data_received(self, data: bytes) -> None:
        self.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            self._abort(UpstreamError(f"upstream sent invalid HTTP: {e}", kind="protocol"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        response = self.response
        if response is not None and self.headers_done is not None and self.headers_done.done() \
                and response.header(b"content-length") is None and response.header(b"transfer-encoding") is None:
            response._finish()  # a body delimited by the end of the connection: this is its end
            self.response = None
            return
        self._abort(UpstreamError("upstream closed the connection mid-reply", kind="closed"))

    # --- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if self.response is not None:
            self.response.headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self.response is None or self.headers_done is None:
            return
        self.response.status = self.parser.get_status_code()
        if not self.headers_done.done():
            self.headers_done.set_result(None)
        if self.head_request:  # no body follows a HEAD reply, whatever Content-Length says
            self.response._finish()
            self.close()

    def on_body(self, body: bytes) -> None:
        response = self.response
        if response is not None:
            response._feed(body)
            if response._buffered > _PAUSE_BYTES and not self.paused and self.transport is not None:
                self.paused = True
                self.transport.pause_reading()

    def on_message_complete(self) -> None:
        response = self.response
        if response is None:
            return
        keep = self.parser.should_keep_alive()
        response._finish()
        response._conn = None
        self.response = None
        # The reply is read to its end, but reading may still be paused for back-pressure (a body over
        # _PAUSE_BYTES the client has not drained): a paused connection in the pool would never read the
        # next reply, whose request would then wait out the read timeout.
        self.resume()
        if keep and not self.lost:
            self.pool._release(self)
        else:
            self.close()

    # --- helpers
    def resume(self) -> None:
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()

    def _abort(self, error: UpstreamError) -> None:
        if self.headers_done is not None and not self.headers_done.done():
            self.headers_done.set_exception(error)
        if self.response is not None:
            self.response._fail(error)
            self.response = None
        self.close()

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

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(lambda: _Connection(self), self.host, self.port),
                timeout=self.connect_timeout)
        except TimeoutError as e:
            raise UpstreamError(f"could not connect to {self.host}:{self.port} in time", kind="timeout") from e
        except OSError as e:
            raise UpstreamError(f"could not connect to {self.host}:{self.port}: {e.strerror or e}",
                                kind="connect") from e
        return conn

    def _release(self, conn: _Connection) -> None:
        if len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    async def request(self, method: str, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes
                      ) -> UpstreamResponse:
        """Send a request; return once the reply's headers arrived (the body streams from `batches`)."""
        head = [method.encode(), b" ", self.prefix + target, b" HTTP/1.1\r\nhost: ", self.authority, b"\r\n"]
        for k, v in headers:
            head += [k, b": ", v, b"\r\n"]
        if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
            head += [b"content-length: ", str(len(body)).encode(), b"\r\n"]
        head.append(b"\r\n")
        payload = b"".join(head) + body
        while self._idle:
            conn = self._idle.pop()
            if conn.lost or conn.transport is None or conn.transport.is_closing():
                continue
            try:
                return await self._send(conn, method, payload)
            except UpstreamError as e:
                if conn.received or e.kind != "closed":
                    raise
                # A reused connection the upstream had already closed: nothing was processed; retry.
        return await self._send(await self._connect(), method, payload)

    async def _send(self, conn: _Connection, method: str, payload: bytes) -> UpstreamResponse:
        loop = asyncio.get_running_loop()
        response = UpstreamResponse(_conn=conn)
        conn.response = response
        conn.headers_done = loop.create_future()
        conn.head_request = method == "HEAD"
        conn.received = False
        assert conn.transport is not None
        conn.transport.write(payload)
        timer = loop.call_later(self.read_timeout, conn._abort,
                                UpstreamError("upstream did not answer within the read timeout", kind="timeout"))
        try:
            await conn.headers_done
        except asyncio.CancelledError:
            conn.close()  # the client left: closing tells the upstream to stop generating
            raise
        finally:
            timer.cancel()
        return response

    def close(self) -> None:
        """Close idle connections."""
        for conn in self._idle:
            conn.close()
        self._idle.clear()
