"""A scripted OpenAI-compatible upstream on 127.0.0.1, written on raw asyncio sockets so every byte on the
wire is under test control: odd chunk boundaries (mid-line, mid-UTF-8 character), SSE comments and
keep-alives, error statuses, a mid-stream disconnect, a stalled stream. It is a test double, not an LLM.

The script is chosen per request by the `x-script` header:
  ok (default)     JSON reply, or an SSE stream when the body has "stream": true
  status:NNN       status NNN with an OpenAI-style JSON error body
  abort            a few SSE chunks, then the socket is closed without the terminating chunk
  slow             an SSE event every 20 ms for ~10 s (client-disconnect tests)
  gated            the first SSE event, then nothing until `release()` (proves no buffering)
  hang             no reply at all until the client goes away
Replies are deterministic functions of the request body, so a direct and a proxied call match.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from dataclasses import dataclass, field
from typing import Any

SPLITS = (1, 7, 3, 50, 2, 11, 5, 64, 1, 1, 29)


def reply_text(prompt: str) -> str:
    """The deterministic answer to a prompt (with multi-byte characters to split across chunks)."""
    digest = hashlib.sha256(prompt.encode()).hexdigest()[:8]
    return f"Answer {digest}: naïve café — ünïcödé ✓ 日本語 and an emoji 🚀 end."


def _prompt(body: dict[str, Any]) -> str:
    if "messages" in body:
        return " | ".join(str(m.get("content")) for m in body["messages"])
    return str(body.get("prompt", ""))


def sse_body(body: dict[str, Any], *, chat: bool) -> bytes:
    """The full SSE stream for a request: role chunk, word chunks, comments, finish, usage, [DONE]."""
    text = reply_text(_prompt(body))
    rid = "cmpl-" + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:12]
    model = body.get("model", "scripted")
    out = [b": keep-alive\n\n"]
    words = text.split(" ")
    pieces = [w + (" " if i < len(words) - 1 else "") for i, w in enumerate(words)]
    if chat:
        out.append(_event({"id": rid, "object": "chat.completion.chunk", "model": model,
                           "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]}))
    for i, piece in enumerate(pieces):
        choice: dict[str, Any] = {"index": 0, "finish_reason": None}
        if chat:
            choice["delta"] = {"content": piece}
        else:
            choice["text"] = piece
        obj = "chat.completion.chunk" if chat else "text_completion"
        out.append(_event({"id": rid, "object": obj, "model": model, "choices": [choice]}, crlf=i % 3 == 1))
        if i == 2:
            out.append(b": ping\n\n")
    last: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        last["delta"] = {}
    else:
        last["text"] = ""
    out.append(_event({"id": rid, "model": model, "choices": [last]}))
    out.append(_event({"id": rid, "model": model, "choices": [],
                       "usage": {"prompt_tokens": len(_prompt(body).split()), "completion_tokens": len(pieces),
                                 "total_tokens": len(_prompt(body).split()) + len(pieces)}}))
    out.append(b"data: [DONE]\n\n")
    return b"".join(out)


def _event(obj: dict[str, Any], *, crlf: bool = False) -> bytes:
    line = b"data: " + json.dumps(obj, ensure_ascii=False).encode()
    return line + (b"\r\n\r\n" if crlf else b"\n\n")


def json_body(body: dict[str, Any], *, chat: bool) -> bytes:
    """The non-streamed reply."""
    text = reply_text(_prompt(body))
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop"}
    if chat:
        choice["message"] = {"role": "assistant", "content": text}
    else:
        choice["text"] = text
    return json.dumps({"id": "cmpl-1", "object": "chat.completion" if chat else "text_completion",
                       "model": body.get("model", "scripted"), "choices": [choice],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 9, "total_tokens": 12}},
                      ensure_ascii=False).encode()


def split(data: bytes) -> list[bytes]:
    """Cut `data` at the odd SPLITS sizes, cycling."""
    parts, i, k = [], 0, 0
    while i < len(data):
        n = SPLITS[k % len(SPLITS)]
        parts.append(data[i:i + n])
        i += n
        k += 1
    return parts


@dataclass
class Seen:
    """One request as the upstream received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class ScriptedUpstream:
    """The scripted server, running in its own thread and event loop."""

    host: str = "127.0.0.1"
    port: int = 0
    requests: list[Seen] = field(default_factory=list)
    disconnects: int = 0  # streams or waits the client abandoned before the reply finished
    completed: int = 0
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.AbstractServer | None = None
    _gate: asyncio.Event | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> ScriptedUpstream:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)

            async def main() -> None:
                self._gate = asyncio.Event()
                self._server = await asyncio.start_server(self._handle, self.host, self.port)
                self.port = self._server.sockets[0].getsockname()[1]
                ready.set()
                async with self._server:
                    await self._server.serve_forever()

            try:
                loop.run_until_complete(main())
            except asyncio.CancelledError:
                pass
            finally:
                loop.close()

        self._thread = threading.Thread(target=run, name="scripted-openai", daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise TimeoutError("scripted upstream did not start")
        return self

    def release(self) -> None:
        """Open the gate of `gated` streams."""
        assert self._loop is not None and self._gate is not None
        self._loop.call_soon_threadsafe(self._gate.set)

    def stop(self) -> None:
        if self._loop is None or self._thread is None:
            return
        loop = self._loop

        def cancel_all() -> None:
            for task in asyncio.all_tasks(loop):
                task.cancel()

        loop.call_soon_threadsafe(cancel_all)
        self._thread.join(10)
        self._loop = None

    def __enter__(self) -> ScriptedUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, v in
                           (line.split(":", 1) for line in lines[1:] if ":" in line)}
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                self.requests.append(Seen(method, path, headers, body))
                keep = await self._respond(method, path, headers, body, reader, writer)
                if not keep:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            writer.close()

    async def _respond(self, method: str, path: str, headers: dict[str, str], raw: bytes,
                       reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        script = headers.get("x-script", "ok")
        if path == "/v1/models" and method == "GET":
            await _plain(writer, 200, b'{"object":"list","data":[{"id":"scripted","object":"model"}]}')
            return True
        body: dict[str, Any] = json.loads(raw) if raw else {}
        chat = path.startswith("/v1/chat/")
        if script.startswith("status:"):
            code = int(script.split(":", 1)[1])
            await _plain(writer, code, json.dumps({"error": {"message": f"scripted {code}", "type": "x",
                                                             "code": code}}).encode())
            return True
        if script == "hang":
            if await reader.read(1) == b"":
                self.disconnects += 1
            return False
        if not body.get("stream") and script == "ok":
            await _plain(writer, 200, json_body(body, chat=chat), extra=b"x-upstream: scripted\r\n")
            self.completed += 1
            return True
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
                     b"cache-control: no-cache\r\nx-upstream: scripted\r\ntransfer-encoding: chunked\r\n\r\n")
        stream = sse_body(body, chat=chat)
        try:
            if script == "abort":
                for part in split(stream)[:6]:
                    await _chunk(writer, part)
                writer.transport.abort()
                return False
            if script == "gated":
                first = stream.index(b"\n\n", stream.index(b"data:")) + 2
                await _chunk(writer, stream[:first])
                assert self._gate is not None
                await self._gate.wait()
                await _chunk(writer, stream[first:])
            elif script == "slow":
                for _ in range(500):
                    await _chunk(writer, b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n')
                    await asyncio.sleep(0.02)
            else:
                for part in split(stream):
                    await _chunk(writer, part)
                    await asyncio.sleep(0)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except ConnectionError:
            self.disconnects += 1
            return False
        self.completed += 1
        return True


async def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    await writer.drain()
    if writer.transport.is_closing():
        raise ConnectionResetError("peer went away")


async def _plain(writer: asyncio.StreamWriter, code: int, body: bytes, *, extra: bytes = b"") -> None:
    writer.write(f"HTTP/1.1 {code} X\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
                 .encode() + extra + b"\r\n" + body)
    await writer.drain()
