"""The sampling reverse proxy: forwards to one version's OpenAI-compatible server, served by its own HTTP/1.1
server (`observer.sample.h1`) and upstream client (`observer.sample.upstream`), both callback-driven.

Bodies, status codes and headers pass through unchanged (hop-by-hop headers dropped); reply chunks are
forwarded the moment they arrive, never buffered. A client disconnect cancels the upstream request; an
upstream disconnect mid-reply breaks the client's reply off the same way. Sampling costs the request a
gate decision and, for selected requests, a copy of the reply chunks; parsing and storage happen later.
Its own endpoints are `/healthz`, `/readyz` and `/observer/metrics` (and `POST /v1/traces` with engine spans
on); every other path is forwarded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Callable, Mapping

import httpx
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from observer import conventions as names
from observer.config.sampling import ProxySpec
from observer.logs import request_fields
from observer.sample.capture import SAMPLED_PATHS, Capture, Kind
from observer.sample.h1 import Request, Responder
from observer.sample.metrics import SamplingMetrics
from observer.sample.otlp_receiver import answer_export
from observer.sample.pipeline import SamplePipeline
from observer.sample.spans import SpanJoin
from observer.sample.tenants import NONE, Tenants
from observer.sample.upstream import Exchange, UpstreamError, UpstreamPool

log = logging.getLogger("observer.proxy")

HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
                        b"proxy-connection", b"te", b"trailer", b"trailers", b"transfer-encoding",
                        b"upgrade"})
# The body is read in full before forwarding, so the upstream gets a plain Content-Length request:
# the client's framing and any 100-continue handshake (answered by the server) end here.
SHADOW_HEADER = b"x-observer-shadow"
"""Marks the observer's own shadow replays (quality.shadow): forwarded, never sampled, counted apart."""
_REQUEST_DROP = HOP_BY_HOP | {b"host", b"content-length", b"expect"}
OWN_PATHS = ("/healthz", "/readyz", "/observer/metrics")
TRACES_PATH = "/v1/traces"
"""With engine spans on (sampling.engine_spans), the proxy answers OTLP exports here itself: a vLLM in the
same pod sends its request spans to the proxy in front of it."""


def new_traceparent() -> str:
    """A fresh W3C traceparent (version 00, random trace and span ids, sampled). Ids from `random`, as the
    OpenTelemetry SDK makes them: unique, not secret, and no syscall per request as os.urandom would be."""
    return f"00-{random.getrandbits(128) or 1:032x}-{random.getrandbits(64) or 1:016x}-01"


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


class ProxyApp:
    """Forward everything to `upstream`; sample chat and text completions of `version` into `pipeline`.
    Served by `observer.sample.h1.H1Server` (it is that server's `Handler`)."""

    def __init__(self, *, version: str, upstream: str, client: httpx.AsyncClient, metrics: SamplingMetrics,
                 pipeline: SamplePipeline | None, max_capture_bytes: int = 1024 * 1024,
                 max_request_bytes: int = 64 * 1024 * 1024, ready_path: str = "/v1/models",
                 registry: CollectorRegistry | None = None, wall: Callable[[], float] = time.time,
                 max_idle_connections: int = 1000, spans: SpanJoin | None = None,
                 gateway_timeout: float | None = None, by_model: Mapping[str, str] | None = None,
                 conversation_header: str | None = None, tenants: Tenants | None = None) -> None:
        self.version = version
        self.tenants = tenants
        self.conversation_header = conversation_header.lower().encode("latin-1") if conversation_header else None
        # Other versions served at the same upstream under their own model names (LoRA adapters on shared
        # pods): a request naming one is that version's, in the counters and the samples.
        self.by_model = dict(by_model or {})
        self.gateway_timeout = gateway_timeout
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
        self._probes: set[asyncio.Task[None]] = set()

    def version_for(self, body: bytes) -> str:
        """The version a generation request belongs to: the one whose model name its body asks for, among
        those sharing this upstream, else this proxy's. The body is parsed only when versions share it."""
        if not self.by_model:
            return self.version
        try:
            model = json.loads(body).get("model")
        except (ValueError, AttributeError):  # not JSON, or not an object: the upstream answers it
            return self.version
        return self.by_model.get(model, self.version) if isinstance(model, str) else self.version

    def handle(self, request: Request, responder: Responder) -> None:
        path = request.path
        if path in OWN_PATHS:
            self._own(path, responder)
        elif path == TRACES_PATH and self.spans is not None and request.method == "POST":
            headers = dict(request.headers)
            code, payload, media = answer_export(
                self.spans, request.body, content_type=headers.get(b"content-type", b"").decode("latin-1"),
                content_encoding=headers.get(b"content-encoding", b"").decode("latin-1"), too_large=None,
                max_bytes=self.max_request_bytes)
            responder.reply(code, payload, content_type=media.encode())
        else:
            _Forward(self, request, responder).start()

    def refuse_too_large(self, path: str, responder: Responder) -> None:
        if path == TRACES_PATH and self.spans is not None:
            code, payload, media = answer_export(
                self.spans, b"", content_type="application/x-protobuf", content_encoding="",
                too_large=f"body over {self.max_request_bytes} bytes", max_bytes=self.max_request_bytes)
            responder.reply(code, payload, content_type=media.encode())
            return
        responder.reply(413, b'{"error":{"message":"request body too large for the observer proxy",'
                             b'"type":"invalid_request_error"}}')
        self.metrics.requests[(self.version, "413")] += 1

    def close(self) -> None:
        """Close idle upstream connections."""
        self.pool.close()
        for task in list(self._probes):
            task.cancel()

    def _own(self, path: str, responder: Responder) -> None:
        if path == "/healthz":
            responder.reply(200, b'{"status":"ok"}')
        elif path == "/readyz":
            task = asyncio.get_running_loop().create_task(self._ready(responder))
            self._probes.add(task)
            task.add_done_callback(self._probes.discard)
        elif self.registry is not None:
            responder.reply(200, generate_latest(self.registry), content_type=CONTENT_TYPE_LATEST.encode())
        else:
            responder.reply(404, b'{"error":"metrics are served by the observer"}')

    async def _ready(self, responder: Responder) -> None:
        ok = await self._upstream_ready()
        responder.reply(200 if ok else 503, b'{"status":"ready"}' if ok else b'{"status":"starting"}')

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

    def _warn_upstream(self, error: UpstreamError, version: str, traceparent: str) -> None:
        now = time.monotonic()
        if now >= self._next_warning:  # at most one line per 10 s: a dead upstream must not flood logs
            self._next_warning = now + 10.0
            log.warning("proxy %s: upstream request failed (%s); counted in %s{code=\"502|504\"}",
                        version, error.kind, names.PROXY_REQUESTS, extra=request_fields(version, traceparent))

    def _done(self, version: str, code: int, added: float, ttft: float | None, e2e: float | None, capture: bool,
              reason: str | None, shadow: bool = False, tenant: str = "") -> None:
        if shadow:  # shadow replays are the observer's own traffic: kept out of the serving SLIs
            self.metrics.shadow[(version, str(code))] += 1
        else:
            self.metrics.observe_request(version, code=code, added_s=added, ttft_s=ttft, e2e_s=e2e)
            if self.tenants is not None and self.tenants.header is not None:
                self.tenants.metrics.observe(version, tenant or NONE, code=code, ttft_s=ttft)
        if capture and reason is not None and self.pipeline is not None:
            self.pipeline.discard(version, reason)


class _Forward:
    """One forwarded request: the upstream's reply goes to the client as it arrives (the `ReplySink`), and a
    selected one is copied for sampling."""

    __slots__ = (
        "added",
        "app",
        "capture",
        "chunks",
        "content_encoding",
        "content_type",
        "conversation",
        "exchange",
        "kind",
        "last_byte",
        "request",
        "responder",
        "shadow",
        "size",
        "status",
        "t_sent",
        "tenant",
        "too_large",
        "traceparent",
        "ttft",
        "version",
    )

    def __init__(self, app: ProxyApp, request: Request, responder: Responder) -> None:
        self.app = app
        self.request = request
        self.responder = responder
        self.kind: Kind | None = SAMPLED_PATHS.get(request.path) if request.method == "POST" else None
        # The labels may change mid-request: the request keeps its version.
        self.version = app.version if self.kind is None else app.version_for(request.body)
        self.capture = False
        self.shadow = False
        self.traceparent = ""
        self.conversation = ""
        self.tenant = ""
        self.exchange: Exchange | None = None
        self.t_sent = 0.0
        self.added = 0.0
        self.ttft: float | None = None
        self.status = 0
        self.content_type = b""
        self.content_encoding = b""
        self.chunks: list[bytes] = []
        self.size = 0
        self.too_large = False
        self.last_byte = request.t0

    def start(self) -> None:
        request, app = self.request, self.app
        headers = forward_headers(request.headers, _REQUEST_DROP)
        traceparent = ""
        for k, v in headers:
            if k == b"traceparent":
                traceparent = v.decode("latin-1")
            elif k == SHADOW_HEADER:
                self.shadow = True
            elif k == app.conversation_header:
                self.conversation = v.decode("latin-1")
            elif app.tenants is not None and k == app.tenants.header and not self.tenant:
                self.tenant = app.tenants.labels.from_header(v.decode("latin-1"), request.peer)
        if not valid_traceparent(traceparent):
            headers = [(k, v) for k, v in headers if k not in (b"traceparent", b"tracestate")]
            traceparent = new_traceparent()
            headers.append((b"traceparent", traceparent.encode()))
        self.traceparent = traceparent
        pipeline = app.pipeline
        self.capture = self.kind is not None and pipeline is not None and not self.shadow \
            and pipeline.want(self.version)
        # A byte search, not a parse: cheap on every request (a prompt quoting the key reads as capped).
        if self.kind is not None and not self.shadow and b'"max_tokens"' not in request.body \
                and b'"max_completion_tokens"' not in request.body:
            app.metrics.uncapped[self.version] += 1
        self.responder.on_gone = self.client_gone
        self.t_sent = time.perf_counter()
        self.exchange = app.pool.send(request.method, request.target, headers, request.body, self)
        self.responder.flow = self.exchange

    # --- ReplySink
    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        t_head = time.perf_counter()
        self.status = status
        length = False
        for k, v in headers:
            lower = k.lower()
            if lower == b"content-length":
                length = True
            elif lower == b"content-type":
                self.content_type = v
            elif lower == b"content-encoding":
                self.content_encoding = v
        self.responder.start(status, forward_headers(headers, HOP_BY_HOP), length=length,
                             head=self.request.method == "HEAD")
        self.added = (self.t_sent - self.request.t0) + (time.perf_counter() - t_head)

    def on_body(self, data: bytes) -> None:
        if self.ttft is None:
            self.ttft = time.perf_counter() - self.request.t0
        if self.app.gateway_timeout is not None:
            self.last_byte = time.perf_counter()
        if self.capture and not self.too_large:
            self.size += len(data)
            if self.size > self.app.max_capture_bytes:
                self.too_large, self.chunks = True, []
            else:
                self.chunks.append(data)
        self.responder.body(data)

    def on_end(self) -> None:
        e2e = time.perf_counter() - self.request.t0
        self.responder.end()
        app, status = self.app, self.status
        reason = None
        if not 200 <= status < 300:
            reason = "upstream_status"
        elif self.too_large:
            reason = "too_large"
        app._done(self.version, status, self.added, self.ttft, e2e, self.capture, reason, self.shadow, self.tenant)
        if app.spans is not None and self.kind is not None and 200 <= status < 300:
            # The engine's TTFT compares with ours only when the reply streams; a plain reply's first byte
            # is its last.
            streamed = self.content_type.startswith(b"text/event-stream")
            app.spans.request_done(self.traceparent.strip().split("-")[1], self.version,
                                   ttft_s=self.ttft if streamed else None, e2e_s=e2e)
        if self.capture and reason is None and self.kind is not None and app.pipeline is not None:
            app.pipeline.submit(Capture(
                version=self.version, kind=self.kind, request=self.request.body, response=b"".join(self.chunks),
                content_type=self.content_type.decode("latin-1"), ts=app._wall() - e2e, ttft_s=self.ttft,
                latency_s=e2e, content_encoding=self.content_encoding.decode("latin-1"),
                traceparent=self.traceparent, conversation=self.conversation))

    def flush(self) -> None:
        self.responder.flush()

    def on_error(self, error: UpstreamError) -> None:
        app = self.app
        if self.responder.started:  # the reply broke off: the client sees it break off the same way
            log.warning("proxy %s: upstream reply broke off: %s", self.version, error.kind,
                        extra=request_fields(self.version, self.traceparent))
            app._done(self.version, self.status, self.added, self.ttft, None, self.capture, "incomplete",
                      self.shadow, self.tenant)
            self.responder.broke_off()
            return
        app._warn_upstream(error, self.version, self.traceparent)
        code = 504 if error.kind == "timeout" else 502
        message = "upstream timed out" if error.kind == "timeout" else "upstream unreachable"
        body = json.dumps({"error": {"message": f"observer proxy: {message}", "type": "upstream_error",
                                     "code": code}}).encode()
        self.responder.reply(code, body)
        app._done(self.version, code, time.perf_counter() - self.request.t0, None, None, self.capture,
                  "upstream_status", self.shadow, self.tenant)

    def client_gone(self) -> None:
        """The client closed the connection before the reply ended: the upstream request is cancelled."""
        if self.exchange is not None:
            self.exchange.abandon()
        now = time.perf_counter()
        elapsed = now - self.request.t0
        timeout = self.app.gateway_timeout
        if timeout is not None and now - self.last_byte >= timeout - min(1.0, 0.1 * timeout):
            # Nothing passed for as long as the gateway waits: the gateway gave up and answered its caller
            # with a timeout. That caller was not served: unavailable, whatever status this reply started with.
            self.app._done(self.version, 504, elapsed, self.ttft, None, self.capture, "incomplete", self.shadow,
                           self.tenant)
            return
        if self.responder.started:
            self.app._done(self.version, self.status, self.added, self.ttft, None, self.capture, "incomplete",
                           self.shadow, self.tenant)
        else:  # 499: the client closed the request before the upstream answered
            self.app._done(self.version, 499, elapsed, None, None, self.capture, "incomplete", self.shadow,
                           self.tenant)


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
            pipeline: SamplePipeline, spans: SpanJoin | None, registry: CollectorRegistry | None = None,
            by_model: Mapping[str, str] | None = None, conversation_header: str | None = None,
            tenants: Tenants | None = None) -> ProxyApp:
    """The proxy of one version with `sampling.proxy`'s limits (in the observer, or as the sidecar); `by_model`:
    the other versions served at the same upstream, by model name."""
    return ProxyApp(version=version, upstream=upstream, client=client, metrics=metrics, pipeline=pipeline,
                    max_capture_bytes=spec.max_capture_bytes, ready_path=spec.ready_path, registry=registry,
                    max_idle_connections=spec.max_connections, max_request_bytes=spec.max_request_bytes, spans=spans,
                    gateway_timeout=spec.gateway_timeout_seconds, by_model=by_model,
                    conversation_header=conversation_header, tenants=tenants)

