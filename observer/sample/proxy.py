"""The sampling reverse proxy: a raw ASGI app forwarding to one version's OpenAI-compatible server.

Bodies, status codes and headers pass through unchanged (hop-by-hop headers dropped); reply chunks are
forwarded the moment they arrive, never buffered. A client disconnect cancels the upstream request; an
upstream disconnect mid-reply aborts the client connection the same way. Sampling costs the request a
gate decision and, for selected requests, a copy of the reply chunks; parsing and storage happen later.
Its own endpoints are `/healthz`, `/readyz` and `/observer/metrics` (and `POST /v1/traces` with engine spans
on); every other path is forwarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from observer import conventions as names
from observer.config.sampling import ProxySpec
from observer.errors import ObserverError
from observer.export import contract
from observer.sample.capture import SAMPLED_PATHS, Capture
from observer.sample.metrics import SamplingMetrics
from observer.sample.otlp_receiver import answer_export
from observer.sample.pipeline import SamplePipeline
from observer.sample.spans import SpanJoin
from observer.sample.upstream import UpstreamError, UpstreamPool

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

log = logging.getLogger("observer.proxy")

HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
                        b"proxy-connection", b"te", b"trailer", b"trailers", b"transfer-encoding",
                        b"upgrade"})
# The body is read in full before forwarding, so the upstream gets a plain Content-Length request:
# the client's framing and any 100-continue handshake (answered by the ASGI server) end here.
SHADOW_HEADER = b"x-observer-shadow"
"""Marks the observer's own shadow replays (quality.shadow): forwarded, never sampled, counted apart."""
_REQUEST_DROP = HOP_BY_HOP | {b"host", b"content-length", b"expect"}
OWN_PATHS = ("/healthz", "/readyz", "/observer/metrics")
TRACES_PATH = "/v1/traces"
"""With engine spans on (sampling.engine_spans), the proxy answers OTLP exports here itself: a vLLM in the
same pod sends its request spans to the proxy in front of it."""


class UpstreamAborted(ObserverError):
    """The upstream closed the reply mid-stream; raised so the ASGI server aborts the client connection."""


def new_traceparent() -> str:
    """A fresh W3C traceparent (version 00, random trace and span ids, sampled)."""
    return f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01"


def valid_traceparent(value: str) -> bool:
    """True for a well-formed version-00 traceparent with non-zero ids."""
    parts = value.strip().split("-")
    if len(parts) != 4 or [len(p) for p in parts] != [2, 32, 16, 2]:
        return False
    try:
        version, trace_id, span_id, _flags = (int(p, 16) for p in parts)
    except ValueError:
        return False
    return value == value.lower() and version != 0xFF and trace_id != 0 and span_id != 0


def forward_headers(raw: list[tuple[bytes, bytes]], drop: frozenset[bytes]) -> list[tuple[bytes, bytes]]:
    """Headers minus hop-by-hop ones and any the Connection header names."""
    named = {t.strip().lower() for k, v in raw if k.lower() == b"connection" for t in v.split(b",")}
    return [(k, v) for k, v in raw if k.lower() not in drop and k.lower() not in named]


@dataclass
class _State:
    finished: bool = False
    client_gone: bool = False
    shadow: bool = False


class ProxyApp:
    """Forward everything to `upstream`; sample chat and text completions of `version` into `pipeline`."""

    def __init__(self, *, version: str, upstream: str, client: httpx.AsyncClient, metrics: SamplingMetrics,
                 pipeline: SamplePipeline | None, max_capture_bytes: int = 1024 * 1024,
                 max_request_bytes: int = 64 * 1024 * 1024, ready_path: str = "/v1/models",
                 registry: CollectorRegistry | None = None, wall: Callable[[], float] = time.time,
                 max_idle_connections: int = 1000, spans: SpanJoin | None = None) -> None:
        self.version = version
        self.upstream = upstream.rstrip("/")
        self.client = client  # for the /readyz probe only; requests go through the lean pool
        timeout = client.timeout
        self.read_timeout = timeout.read if timeout.read is not None else 600.0
        self.pool = UpstreamPool(self.upstream, connect_timeout=timeout.connect or 5.0,
                                 read_timeout=self.read_timeout, max_idle=max_idle_connections)
        self.metrics = metrics
        self.pipeline = pipeline
        self.max_capture_bytes = max_capture_bytes
        self.max_request_bytes = max_request_bytes
        self.ready_path = ready_path
        self.registry = registry
        self.spans = spans
        self._wall = wall
        self._ready_until = 0.0
        self._next_warning = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"]
        if path in OWN_PATHS:
            await self._own(path, send)
            return
        if path == TRACES_PATH and self.spans is not None and scope["method"] == "POST":
            await self._traces(self.spans, scope, receive, send)
            return
        await self._forward(scope, receive, send)

    async def _traces(self, join: SpanJoin, scope: Scope, receive: Receive, send: Send) -> None:
        read = await _read_body(scope, receive, self.max_request_bytes)
        if read is None:  # the exporter left before sending its request
            return
        body, too_large = read
        headers = {k.lower(): v.decode("latin-1") for k, v in scope["headers"]}
        code, payload, media = answer_export(
            join, body, content_type=headers.get(b"content-type", ""),
            content_encoding=headers.get(b"content-encoding", ""), too_large=too_large,
            max_bytes=self.max_request_bytes)
        await _reply(send, code, payload, content_type=media.encode())

    def close(self) -> None:
        """Close idle upstream connections."""
        self.pool.close()

    async def _own(self, path: str, send: Send) -> None:
        if path == "/healthz":
            await _reply(send, 200, b'{"status":"ok"}')
        elif path == "/readyz":
            ok = await self._upstream_ready()
            await _reply(send, 200 if ok else 503, b'{"status":"ready"}' if ok else b'{"status":"starting"}')
        elif self.registry is not None:
            await _reply(send, 200, generate_latest(self.registry), content_type=CONTENT_TYPE_LATEST.encode())
        else:
            await _reply(send, 404, b'{"error":"metrics are served by the observer"}')

    async def _upstream_ready(self) -> bool:
        now = time.monotonic()
        if now < self._ready_until:
            return True
        try:
            resp = await self.client.get(self.upstream + self.ready_path, timeout=2.0)
        except httpx.HTTPError:
            return False
        if resp.status_code == 200:
            self._ready_until = now + 1.0
            return True
        return False

    async def _forward(self, scope: Scope, receive: Receive, send: Send) -> None:
        t0 = time.perf_counter()
        read = await _read_body(scope, receive, self.max_request_bytes)
        if read is None:  # client left before sending its request
            return
        body, too_large = read
        if too_large is not None:
            await _reply(send, 413, b'{"error":{"message":"request body too large for the observer proxy",'
                                    b'"type":"invalid_request_error"}}')
            self.metrics.requests[(self.version, "413")] += 1
            return
        state = _State()
        task = asyncio.current_task()
        assert task is not None
        watcher = asyncio.create_task(_watch_disconnect(receive, state, task))
        try:
            await self._exchange(scope, body, send, t0, state)
        except asyncio.CancelledError:
            if not state.client_gone:
                raise
            task.uncancel()  # the cancellation was ours (client left), not the server's
        finally:
            state.finished = True
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    async def _exchange(self, scope: Scope, body: bytes, send: Send, t0: float, state: _State) -> None:
        method = scope["method"]
        path = scope["path"]
        headers = forward_headers(list(scope["headers"]), _REQUEST_DROP)
        traceparent = next((v.decode("latin-1") for k, v in headers if k.lower() == b"traceparent"), "")
        if not valid_traceparent(traceparent):
            headers = [(k, v) for k, v in headers if k.lower() not in (b"traceparent", b"tracestate")]
            traceparent = new_traceparent()
            headers.append((b"traceparent", traceparent.encode()))
        target: bytes = scope.get("raw_path") or path.encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        kind = SAMPLED_PATHS.get(path) if method == "POST" else None
        pipeline = self.pipeline
        state.shadow = any(k.lower() == SHADOW_HEADER for k, _ in headers)
        capture = kind is not None and pipeline is not None and not state.shadow and pipeline.want(self.version)
        t_sent = time.perf_counter()
        try:
            resp = await self.pool.request(method, target, headers, body)
        except UpstreamError as e:
            now = time.monotonic()
            if now >= self._next_warning:  # at most one line per 10 s: a dead upstream must not flood logs
                self._next_warning = now + 10.0
                log.warning("proxy %s: upstream request failed (%s); counted in %s{code=\"502|504\"}",
                            self.version, e.kind, names.PROXY_REQUESTS)
            await self._fail(send, 504 if e.kind == "timeout" else 502,
                             "upstream timed out" if e.kind == "timeout" else "upstream unreachable", t0, capture,
                             state.shadow)
            return
        except asyncio.CancelledError:
            if state.client_gone:  # 499: the client closed the request before the upstream answered
                self._done(499, time.perf_counter() - t0, None, None, capture, "incomplete", state.shadow)
            raise
        t_headers = time.perf_counter()
        chunks: list[bytes] = []
        size = 0
        too_large = False
        ttft: float | None = None
        status = resp.status
        batches = resp.batches(read_timeout=self.read_timeout)
        try:
            await send({"type": "http.response.start", "status": status,
                        "headers": forward_headers(resp.headers, HOP_BY_HOP)})
            added = (t_sent - t0) + (time.perf_counter() - t_headers)
            try:
                # Each batch is what one socket read brought: forwarded at once, never held back.
                async for chunk in batches:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    if capture and not too_large:
                        size += len(chunk)
                        if size > self.max_capture_bytes:
                            too_large, chunks = True, []
                        else:
                            chunks.append(chunk)
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            except UpstreamError as e:
                self._done(status, added, ttft, None, capture, "incomplete", state.shadow)
                raise UpstreamAborted(f"upstream reply broke off: {e.kind}") from e
            state.finished = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if state.client_gone:
                self._done(status, time.perf_counter() - t0, ttft, None, capture, "incomplete", state.shadow)
            raise
        finally:
            await batches.aclose()
            resp.close()
        e2e = time.perf_counter() - t0
        reason = None
        if not 200 <= status < 300:
            reason = "upstream_status"
        elif too_large:
            reason = "too_large"
        self._done(status, added, ttft, e2e, capture, reason, state.shadow)
        if self.spans is not None and kind is not None and 200 <= status < 300:
            # The engine's TTFT compares with ours only when the reply streams; a plain reply's first byte
            # is its last.
            streamed = (resp.header(b"content-type") or b"").startswith(b"text/event-stream")
            self.spans.request_done(traceparent.strip().split("-")[1], self.version,
                                    ttft_s=ttft if streamed else None, e2e_s=e2e)
        if capture and reason is None and kind is not None and self.pipeline is not None:
            self.pipeline.submit(Capture(
                version=self.version, kind=kind, request=body, response=b"".join(chunks),
                content_type=(resp.header(b"content-type") or b"").decode("latin-1"), ts=self._wall() - e2e,
                ttft_s=ttft, latency_s=e2e,
                content_encoding=(resp.header(b"content-encoding") or b"").decode("latin-1")))

    def _done(self, code: int, added: float, ttft: float | None, e2e: float | None, capture: bool,
              reason: str | None, shadow: bool = False) -> None:
        if shadow:  # shadow replays are the observer's own traffic: kept out of the serving SLIs
            self.metrics.shadow[(self.version, str(code))] += 1
        else:
            self.metrics.observe_request(self.version, code=code, added_s=added, ttft_s=ttft, e2e_s=e2e)
        if capture and reason is not None and self.pipeline is not None:
            self.pipeline.discard(self.version, reason)

    async def _fail(self, send: Send, code: int, message: str, t0: float, capture: bool, shadow: bool = False
                    ) -> None:
        body = json.dumps({"error": {"message": f"observer proxy: {message}", "type": "upstream_error",
                                     "code": code}}).encode()
        await _reply(send, code, body)
        self._done(code, time.perf_counter() - t0, None, None, capture, "upstream_status", shadow)


class _Disconnected(Exception):
    """The client left before its request body was read."""


async def _chunks(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        yield message.get("body", b"")
        if not message.get("more_body", False):
            return


async def _read_body(scope: Scope, receive: Receive, limit: int) -> tuple[bytes, str | None] | None:
    """The request body and why it is refused (`contract.read_capped`); None when the client left."""
    declared = next((v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"content-length"), None)
    try:
        return await contract.read_capped(declared, _chunks(receive), limit)
    except _Disconnected:
        return None


async def _watch_disconnect(receive: Receive, state: _State, task: asyncio.Task[Any]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            if not state.finished:
                state.client_gone = True
                task.cancel()
            return


async def _reply(send: Send, status: int, body: bytes, *, content_type: bytes = b"application/json") -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class QuietAborts(logging.Filter):
    """Drop the ASGI server's traceback for UpstreamAborted (the abort is intended; we log it ourselves)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, UpstreamAborted):
            log.warning("proxy: %s", exc)
            return False
        return True


def build_client(*, connect_timeout: float, read_timeout: float, max_connections: int) -> httpx.AsyncClient:
    """The upstream client: pooled keep-alive connections, no redirects, no decoding of bodies."""
    return httpx.AsyncClient(
        timeout=httpx.Timeout(connect=connect_timeout, read=read_timeout, write=read_timeout, pool=connect_timeout),
        limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        follow_redirects=False, trust_env=False)


def default_upstream(openai_url: str | None) -> str | None:
    """The server root of a version's OpenAI base URL (`http://h:p/v1` → `http://h:p`)."""
    if openai_url is None:
        return None
    url = openai_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def client_for(spec: ProxySpec) -> httpx.AsyncClient:
    """The upstream client of `sampling.proxy`'s timeouts and connection cap."""
    return build_client(connect_timeout=spec.connect_timeout_seconds, read_timeout=spec.read_timeout_seconds,
                        max_connections=spec.max_connections)


def app_for(spec: ProxySpec, *, version: str, upstream: str, client: httpx.AsyncClient, metrics: SamplingMetrics,
            pipeline: SamplePipeline, spans: SpanJoin | None, registry: CollectorRegistry | None = None) -> ProxyApp:
    """The proxy of one version with `sampling.proxy`'s limits (in the observer, or as the sidecar)."""
    return ProxyApp(version=version, upstream=upstream, client=client, metrics=metrics, pipeline=pipeline,
                    max_capture_bytes=spec.max_capture_bytes, ready_path=spec.ready_path, registry=registry,
                    max_idle_connections=spec.max_connections, max_request_bytes=spec.max_request_bytes, spans=spans)

