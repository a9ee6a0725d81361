"""A lean HTTP/1.1 load generator (asyncio protocol + httptools' C parser): it must cost far less CPU per
request than any gateway it measures, and read time to the first body chunk exactly.

`Target(url)` keeps idle keep-alive connections; `await target.one(body)` sends one POST and returns a
`Result` (status, time to the first body bytes, time to the end), or None when the connection failed.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

import httptools


@dataclass(frozen=True)
class Result:
    """One request: status code, seconds to the first body bytes and to the end of the reply."""

    status: int
    first_s: float
    total_s: float


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.done: asyncio.Future[Result] | None = None
        self.t0 = 0.0
        self.first = 0.0
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection closed mid-reply"))

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as e:
            if self.done is not None and not self.done.done():
                self.done.set_exception(ConnectionError(f"invalid HTTP: {e}"))
            if self.transport is not None:
                self.transport.close()

    def on_body(self, body: bytes) -> None:
        if not self.first:
            self.first = time.perf_counter()

    def on_message_complete(self) -> None:
        now = time.perf_counter()
        first = self.first or now
        if self.done is not None and not self.done.done():
            self.done.set_result(Result(self.parser.get_status_code(), first - self.t0, now - self.t0))
        if not self.parser.should_keep_alive() and self.transport is not None:
            self.transport.close()

    def send(self, payload: bytes) -> asyncio.Future[Result]:
        assert self.transport is not None
        self.done = asyncio.get_running_loop().create_future()
        self.first = 0.0
        self.t0 = time.perf_counter()
        self.transport.write(payload)
        return self.done


class Target:
    """Keep-alive connections to one server; requests never pipeline (one in flight per connection)."""

    def __init__(self, url: str, *, path: str = "/v1/chat/completions", headers: dict[str, str] | None = None
                 ) -> None:
        host, port = url.removeprefix("http://").rstrip("/").split(":")
        self.host, self.port, self.path = host, int(port), path
        self.extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        self.idle: list[_Conn] = []
        self.failed = 0

    def encode(self, body: dict[str, Any]) -> bytes:
        data = json.dumps(body).encode()
        return (f"POST {self.path} HTTP/1.1\r\nhost: {self.host}:{self.port}\r\ncontent-type: application/json\r\n"
                f"{self.extra}content-length: {len(data)}\r\n\r\n").encode() + data

    async def one(self, payload: bytes, *, timeout: float = 60.0) -> Result | None:
        conn = None
        while self.idle:
            candidate = self.idle.pop()
            if not candidate.lost:
                conn = candidate
                break
        try:
            if conn is None:
                _, conn = await asyncio.get_running_loop().create_connection(_Conn, self.host, self.port)
            result = await asyncio.wait_for(conn.send(payload), timeout)
        except (OSError, ConnectionError, TimeoutError):
            self.failed += 1
            if conn is not None and conn.transport is not None:
                conn.transport.close()
            return None
        if not conn.lost:
            self.idle.append(conn)
        return result

    def close(self) -> None:
        for conn in self.idle:
            if conn.transport is not None:
                conn.transport.close()
        self.idle.clear()
