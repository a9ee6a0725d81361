"""The proxy's lean upstream client against raw loopback servers: framing, reuse, stale connections,
back-pressure, timeouts and errors."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from observer.sample.upstream import Exchange, UpstreamError, UpstreamPool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


class Collect:
    """A ReplySink that gathers the reply; `paused` holds the exchange paused (a slow client) until `drain`."""

    def __init__(self, *, slow: bool = False) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []
        self.slow = slow
        self.exchange: Exchange | None = None
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status, self.headers = status, headers
        if self.slow and self.exchange is not None:
            self.exchange.pause()

    def on_body(self, data: bytes) -> None:
        self.chunks.append(data)

    def on_end(self) -> None:
        self.done.set_result(None)

    def on_error(self, error: UpstreamError) -> None:
        self.done.set_exception(error)

    def flush(self) -> None:
        pass

    @property
    def buffered(self) -> int:
        return sum(map(len, self.chunks))


async def serve(handler: Handler) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head + await reader.readexactly(length)


async def body(pool: UpstreamPool, method: str = "POST", payload: bytes = b"{}") -> tuple[int, bytes]:
    sink = Collect()
    sink.exchange = pool.send(method, b"/v1/x", [(b"x-a", b"1")], payload, sink)
    await sink.done
    return sink.status, b"".join(sink.chunks)


@pytest.fixture
async def cleanup() -> AsyncIterator[list[asyncio.Server]]:
    servers: list[asyncio.Server] = []
    yield servers
    for s in servers:
        s.close()
        await s.wait_closed()


async def test_keep_alive_reuse_and_request_bytes(cleanup: list[asyncio.Server]) -> None:
    seen: list[bytes] = []
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        while True:
            try:
                seen.append(await read_request(reader))
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()

    server, port = await serve(handler)
    cleanup.append(server)
    pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=5, max_idle=4)
    for _ in range(3):
        assert await body(pool) == (200, b"ok")
    assert connections == 1  # one keep-alive connection served all three
    assert seen[0] == (f"POST /v1/x HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\nx-a: 1\r\ncontent-length: 2\r\n\r\n{{}}"
                       ).encode()
    pool.close()


async def test_body_delimited_by_connection_close_and_stale_connection_retry(
        cleanup: list[asyncio.Server]) -> None:
    calls = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal calls
        calls += 1
        await read_request(reader)
        if calls == 1:  # keep-alive reply, then the server drops the idle connection
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\na")
            await writer.drain()
            await asyncio.sleep(0.05)
        else:  # no length, no chunking: the body ends with the connection
            writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nuntil-eof")
            await writer.drain()
        writer.close()

    server, port = await serve(handler)
    cleanup.append(server)
    pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=5, max_idle=4)
    assert await body(pool) == (200, b"a")
    await asyncio.sleep(0.2)  # the idle connection is now closed by the server
    assert await body(pool) == (200, b"until-eof")
    assert calls == 2


async def test_a_request_on_a_connection_the_upstream_closes_unanswered_is_sent_again(
        cleanup: list[asyncio.Server]) -> None:
    """The keep-alive race: the upstream (uvicorn closes idle connections after 5 s) closes a pooled connection
    just as a request goes out on it, reading nothing of it. The request goes again on a fresh connection and
    is answered; it is never left without an answer or an error."""
    connections = 0

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        first = connections == 1
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await writer.drain()
        if first:  # the next request arrives as the server gives the connection up: it is never answered
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
                await read_request(reader)
        writer.close()

    server, port = await serve(handler)
    cleanup.append(server)
    pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=5, max_idle=4)
    try:
        assert await body(pool) == (200, b"ok")
        assert await asyncio.wait_for(body(pool), timeout=3) == (200, b"ok")
        assert connections == 2
    finally:
        pool.close()


async def test_back_pressure_pauses_reading_and_loses_nothing(cleanup: list[asyncio.Server]) -> None:
    blob = bytes(range(256)) * 16 * 1024  # 4 MiB, more than the pause threshold

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(blob))
        for i in range(0, len(blob), 65536):
            writer.write(blob[i:i + 65536])
            await writer.drain()
        writer.close()

    server, port = await serve(handler)
    cleanup.append(server)
    pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=5, max_idle=4)
    sink = Collect(slow=True)
    sink.exchange = pool.send("GET", b"/big", [], b"", sink)
    await asyncio.sleep(0.3)  # a slow client paused reading: what arrived is what the socket read before
    assert sink.buffered <= 2 * 1024 * 1024
    held = sink.buffered
    await asyncio.sleep(0.2)
    assert sink.buffered == held  # paused: nothing more is read
    sink.exchange.resume()
    await sink.done
    assert b"".join(sink.chunks) == blob


@pytest.mark.parametrize(("script", "kind"), [("hang", "timeout"), ("garbage", "protocol"), ("cut", "closed")])
async def test_failures_are_typed(cleanup: list[asyncio.Server], script: str, kind: str) -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        if script == "hang":
            await asyncio.sleep(5)
        elif script == "garbage":
            writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        else:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nshort")
            await writer.drain()
        writer.close()

    server, port = await serve(handler)
    cleanup.append(server)
    pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=0.3, max_idle=4)
    with pytest.raises(UpstreamError) as err:
        await body(pool)
    assert err.value.kind == kind


async def test_connect_errors_and_bad_urls() -> None:
    from tests.support.prom import free_port

    pool = UpstreamPool(f"http://127.0.0.1:{free_port()}", connect_timeout=2, read_timeout=1, max_idle=1)
    with pytest.raises(UpstreamError) as err:
        await body(pool)
    assert err.value.kind == "connect"
    with pytest.raises(ValueError, match="http://host"):
        UpstreamPool("https://example.com", connect_timeout=1, read_timeout=1, max_idle=1)


@pytest.mark.parametrize("size", [1024 * 1024 + 1000, 1024 * 1024 + 100_000, 5 * 1024 * 1024],
                         ids=["1MiB+1000", "1MiB+100k", "5MiB"])
async def test_a_connection_after_a_large_reply_serves_the_next_request(cleanup: list[asyncio.Server],
                                                                        size: int) -> None:
    """After a reply read with pauses the connection goes back to the pool reading: a paused one would make the
    next request on it wait for the read timeout (504)."""
    big = b"x" * size

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        while True:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            payload = big if n == 0 else b"ok"
            n += 1
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload)
            await writer.drain()

    server, port = await serve(handler)
    cleanup.append(server)
    pool = UpstreamPool(f"http://127.0.0.1:{port}", connect_timeout=2, read_timeout=2, max_idle=4)
    try:
        sink = Collect(slow=True)
        sink.exchange = pool.send("POST", b"/v1/x", [], b"{}", sink)
        await asyncio.sleep(0.2)  # the client has not read: reading pauses mid-reply
        sink.exchange.resume()
        await sink.done
        assert sum(map(len, sink.chunks)) == size
        for _ in range(3):
            status, out = await asyncio.wait_for(body(pool), timeout=1.5)
            assert (status, out) == (200, b"ok")
    finally:
        pool.close()
