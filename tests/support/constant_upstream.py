"""A constant-delay OpenAI-compatible server: every reply after a fixed, known latency, so that what a gateway
in front of it adds is all a benchmark sees (no engine jitter).

    python -m tests.support.constant_upstream --port 8000 --delay-ms 20

`POST /v1/chat/completions` and `/v1/completions` answer after `--delay-ms`: a plain JSON reply, or with
`"stream": true` an SSE stream whose first chunk leaves after the delay and the rest `--chunk-gap-ms` apart
(`--chunks` content chunks, then `[DONE]`). `GET /v1/models` lists the one model; anything else is 404.
A raw asyncio protocol with httptools' C parser (uvloop when installed): its own CPU per request is far
below any gateway's, and it runs in its own process, so it never shares a gateway's CPU account.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

import httptools

MODEL = "stable"
_WORDS = ["The", " release", " fixes", " the", " tokenizer", " cache", " and", " speeds", " up", " decoding."]


def _plain(kind: bytes, words: int) -> bytes:
    text = "".join(_WORDS[i % len(_WORDS)] for i in range(words))
    if kind == b"chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
    else:
        choice = {"index": 0, "text": text, "finish_reason": "stop"}
    return json.dumps({"id": "cmpl-const", "object": "chat.completion" if kind == b"chat" else "text_completion",
                       "created": 0, "model": MODEL, "choices": [choice],
                       "usage": {"prompt_tokens": 12, "completion_tokens": words,
                                 "total_tokens": 12 + words}}).encode()


def _event(kind: bytes, text: str | None, finish: str | None = None) -> bytes:
    if kind == b"chat":
        delta = {} if text is None else {"content": text}
        choice: dict[str, object] = {"index": 0, "delta": delta, "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "finish_reason": finish}
    payload = {"id": "cmpl-const", "object": "chat.completion.chunk" if kind == b"chat" else "text_completion",
               "created": 0, "model": MODEL, "choices": [choice]}
    data = b"data: " + json.dumps(payload).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


class _Conn(asyncio.Protocol):
    def __init__(self, server: ConstantServer) -> None:
        self.server = server
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.url = b""
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            if self.transport is not None:
                self.transport.close()

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        url, body = self.url, b"".join(self.body)
        self.url, self.body = b"", []
        method = self.parser.get_method()
        self.server.requests += 1
        loop = asyncio.get_running_loop()
        if method == b"GET" and url.startswith(b"/v1/models"):
            self._send(200, json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode())
        elif method == b"POST" and url.startswith((b"/v1/chat/completions", b"/v1/completions")):
            kind = b"chat" if b"chat" in url else b"completion"
            try:
                stream = bool(json.loads(body).get("stream"))
            except (ValueError, AttributeError):
                self._send(400, b'{"error":{"message":"body is not a JSON object"}}')
                return
            if stream:
                loop.call_later(self.server.delay, self._stream, kind, 0)
            else:
                loop.call_later(self.server.delay, self._send, 200, _plain(kind, self.server.chunks))
        else:
            self._send(404, b'{"error":{"message":"not found"}}')

    def _send(self, status: int, body: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found"}[status]
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (status, reason, len(body), body))

    def _stream(self, kind: bytes, i: int) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        out = b""
        if i == 0:
            out = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                   b"transfer-encoding: chunked\r\n\r\n")
        if i < self.server.chunks:
            transport.write(out + _event(kind, _WORDS[i % len(_WORDS)]))
            asyncio.get_running_loop().call_later(self.server.gap, self._stream, kind, i + 1)
            return
        done = b"data: [DONE]\n\n"
        transport.write(out + _event(kind, None, "stop") + b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))


class ConstantServer:
    """The server's settings and its request count."""

    def __init__(self, *, delay_s: float, chunk_gap_s: float, chunks: int) -> None:
        self.delay = delay_s
        self.gap = chunk_gap_s
        self.chunks = chunks
        self.requests = 0

    async def serve(self, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Conn(self), host, port, backlog=1024)
        stop = loop.create_future()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, lambda: stop.done() or stop.set_result(None))
        started = time.monotonic()
        try:
            await stop
        finally:
            server.close()
            print(f"constant upstream: {self.requests} requests in {time.monotonic() - started:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--chunk-gap-ms", type=float, default=5.0)
    parser.add_argument("--chunks", type=int, default=4)
    args = parser.parse_args()
    server = ConstantServer(delay_s=args.delay_ms / 1000, chunk_gap_s=args.chunk_gap_ms / 1000, chunks=args.chunks)
    try:
        import uvloop
        uvloop.run(server.serve(args.host, args.port))
    except ImportError:
        asyncio.run(server.serve(args.host, args.port))


if __name__ == "__main__":
    main()
