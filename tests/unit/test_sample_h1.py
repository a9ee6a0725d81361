"""The proxy's own HTTP/1.1 server at the byte level: pipelined requests answered in order, HTTP/1.0
clients, 100-continue, bodies over the limit, malformed requests, idle keep-alive, and a reply that breaks
off. A scripted handler answers, so what is checked is the server, not the proxy."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from observer.httpserve import ConnectionGuard
from observer.sample.h1 import H1Server, Request, Responder


class Script:
    """Answers `/slow` after 50 ms, `/stream` in three chunks then an end, `/broken` with one chunk then a
    break, anything else at once with the request's path and body."""

    max_request_bytes = 1024

    def __init__(self) -> None:
        self.seen: list[Request] = []
        self.too_large = 0

    def handle(self, request: Request, responder: Responder) -> None:
        self.seen.append(request)
        loop = asyncio.get_running_loop()
        if request.path == "/slow":
            loop.call_later(0.05, responder.reply, 200, b"slow")
        elif request.path in ("/stream", "/broken"):
            responder.start(200, [(b"content-type", b"text/event-stream")], length=False)
            responder.body(b"data: 1\n\n")
            responder.flush()
            if request.path == "/broken":
                loop.call_later(0.02, responder.broke_off)
            else:
                loop.call_later(0.02, lambda: (responder.body(b"data: 2\n\n"), responder.end()))
        else:
            responder.reply(200, request.path.encode() + b"|" + request.body)

    def refuse_too_large(self, path: str, responder: Responder) -> None:
        self.too_large += 1
        responder.reply(413, b"too large")


@pytest.fixture
async def served() -> AsyncIterator[tuple[H1Server, Script]]:
    script = Script()
    server = H1Server(script, guard=ConnectionGuard("test", header_timeout_seconds=0.5), keep_alive_seconds=0.3)
    await server.start("127.0.0.1", 0)
    yield server, script
    await server.stop(timeout=1)


async def exchange(port: int, data: bytes, *, wait: float = 0.3) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    await writer.drain()
    out = b""
    try:
        while True:
            chunk = await asyncio.wait_for(reader.read(65536), wait)
            if not chunk:
                break
            out += chunk
    except TimeoutError:
        pass
    writer.close()
    return out


async def test_pipelined_requests_are_answered_in_order(served: tuple[H1Server, Script]) -> None:
    server, _ = served
    out = await exchange(server.port, b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n"
                                      b"POST /fast HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nhi")
    assert out.index(b"slow") < out.index(b"/fast|hi")
    assert out.count(b"HTTP/1.1 200 OK") == 2


async def test_chunked_reply_and_chunked_request(served: tuple[H1Server, Script]) -> None:
    server, _ = served
    out = await exchange(server.port, b"POST /stream HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                                      b"2\r\nab\r\n0\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head
    assert body == b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"


async def test_http10_client_gets_a_close_delimited_reply(served: tuple[H1Server, Script]) -> None:
    server, _ = served
    out = await exchange(server.port, b"GET /stream HTTP/1.0\r\n\r\n")
    head, _, body = out.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head and b"connection: close" in head
    assert body == b"data: 1\n\ndata: 2\n\n"  # no chunk framing, the end is the connection's close


async def test_expect_continue_and_body_over_the_limit(served: tuple[H1Server, Script]) -> None:
    server, script = served
    out = await exchange(server.port, b"POST /x HTTP/1.1\r\nhost: x\r\nexpect: 100-continue\r\n"
                                      b"content-length: 3\r\n\r\nabc")
    assert out.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK") and out.endswith(b"/x|abc")
    out = await exchange(server.port, b"POST /x HTTP/1.1\r\nhost: x\r\ncontent-length: 5000\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413") and b"connection: close" in out
    out = await exchange(server.port, b"POST /x HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                                      + b"400\r\n" + b"a" * 1024 + b"\r\n400\r\n" + b"a" * 1024 + b"\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 413")
    assert script.too_large == 2


async def test_malformed_request_is_a_400_and_a_close(served: tuple[H1Server, Script]) -> None:
    server, script = served
    out = await exchange(server.port, b"NOT A REQUEST\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400") and b"connection: close" in out
    assert not script.seen


async def test_a_reply_that_breaks_off_reaches_the_client_incomplete(served: tuple[H1Server, Script]) -> None:
    server, _ = served
    out = await exchange(server.port, b"GET /broken HTTP/1.1\r\nhost: x\r\n\r\n", wait=1.0)
    assert out.endswith(b"9\r\ndata: 1\n\n\r\n")  # what was sent, then the close: no terminating chunk


async def test_idle_keep_alive_and_slow_heads_are_closed(served: tuple[H1Server, Script]) -> None:
    server, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /a HTTP/1.1\r\nhost: x\r\n\r\n")
    first = await reader.read(65536)
    assert first.endswith(b"/a|")
    assert await asyncio.wait_for(reader.read(), 2.0) == b""  # closed once idle past keep_alive_seconds
    writer.close()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /a HTTP/1.1\r\nho")  # a head that never ends
    out = await asyncio.wait_for(reader.read(), 2.0)
    assert out.startswith(b"HTTP/1.1 408")
    assert server.guard is not None and server.guard.refused["header_timeout"] == 1
    writer.close()


async def test_stop_lets_the_request_in_flight_finish() -> None:
    script = Script()
    server = H1Server(script)
    await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
    await writer.drain()
    await asyncio.sleep(0.01)
    await server.stop(timeout=2)
    assert (await reader.read(65536)).endswith(b"slow")
    writer.close()
